"""Stochastic gradient descent, with optional (Nesterov) momentum."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from nmt.config.fields import opt
from nmt.errors import ConfigError
from nmt.registry import register_optimizer
from nmt.training.optimizer import with_fast_kernel


@dataclass
class SGDConfig:
    momentum: float = opt(0.0, "SGD momentum factor (0 = plain SGD).")
    nesterov: bool = opt(False, "Use Nesterov momentum (needs --momentum > 0).")
    weight_decay: float = opt(0.0, "Weight decay (adam, sgd: an L2 term added to the gradient; "
                                    "adamw: decoupled from it).")


@register_optimizer("sgd", config=SGDConfig)
def build_sgd(cfg: SGDConfig, params: list[Any], lr: float) -> torch.optim.Optimizer:
    """torch.optim.SGD with the fused or foreach kernel."""
    if cfg.nesterov and cfg.momentum <= 0:
        raise ConfigError("--nesterov needs --momentum > 0 (e.g. --momentum 0.9)")
    return with_fast_kernel(torch.optim.SGD, params, lr=lr, momentum=cfg.momentum, nesterov=cfg.nesterov,
                            weight_decay=cfg.weight_decay)
