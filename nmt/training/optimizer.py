"""Optimizers by name: the builder the trainer calls and helpers the ``--optimizer`` plugins share.

An optimizer plugin is a ``torch.optim.Optimizer`` subclass constructed as ``cls(cfg, params, lr)``,
registered with ``@register_optimizer("name", config=ItsOptionsDataclass)``; a ``--user-dir`` folder can
add one.
"""

from __future__ import annotations

import ast
from typing import Any, Callable, Iterable

import torch

from nmt.errors import ConfigError
from nmt.registry import OPTIMIZER


def parse_floats(text: Any, option: str, count: int | None = None) -> tuple[float, ...]:
    """``'(0.9,0.98)'``, ``'0.9, 0.98'`` or ``[0.9, 0.98]`` -> ``(0.9, 0.98)`` (fairseq writes tuples as strings)."""
    value = text
    if isinstance(text, str):
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            value = None
    if isinstance(value, (int, float)):
        value = (value,)
    ok = isinstance(value, (tuple, list)) and all(isinstance(v, (int, float)) for v in value)
    if not ok or (count is not None and len(value) != count):
        want = f"{count} numbers" if count else "numbers"
        raise ConfigError(f"{option} {text!r}: expected {want} like '(0.9,0.98)'")
    return tuple(float(v) for v in value)


def parse_betas(text: Any, option: str) -> tuple[float, float]:
    """Two coefficients in [0, 1), e.g. ``'(0.9,0.98)'`` for ``--adam-betas``."""
    betas = parse_floats(text, option, count=2)
    if not all(0.0 <= b < 1.0 for b in betas):
        raise ConfigError(f"{option} {text!r}: each beta must be in [0, 1), like '(0.9,0.98)'")
    return betas[0], betas[1]


def init_with_fast_kernel(init: Callable[..., None], params: list[Any], **options: Any) -> None:
    """Call an optimizer's ``__init__`` with torch's fastest update kernel: ``fused`` (one kernel for all
    parameters; on CPU since torch 2.4, ~4x faster than foreach for Adam: benchmarks/RESULTS.md, bench_optimizers),
    else ``foreach`` (multi-tensor) when this torch, device or dtype has no fused kernel."""
    try:
        init(params, fused=True, **options)
    except (RuntimeError, TypeError, ValueError):
        init(params, foreach=True, **options)


def trainable(params: Iterable[Any]) -> list[Any]:
    """The parameters (or param-group dicts) that need gradients; an empty list is a config error."""
    params = list(params)
    if params and isinstance(params[0], dict):
        return params
    out = [p for p in params if getattr(p, "requires_grad", True)]
    if not out:
        raise ConfigError("the optimizer got no trainable parameters; check that the model has parameters")
    return out


def build_optimizer(group: dict[str, Any], params: Iterable[Any], lr: float) -> torch.optim.Optimizer:
    """The optimizer a plugin group names (``{"name": "adam", "adam_betas": "(0.9,0.98)", ...}``)."""
    return OPTIMIZER.build(group["name"], group, trainable(params), float(lr))
