"""Dropout that rises with the epochs (``--dropout-final``): more regularization as the model sees the data again.

A short budget sees each sentence a few times and wants little dropout; a long one (or the same budget on a faster
CPU) sees it dozens of times and over-fits unless dropout grows. A rate fixed in a recipe is right for one of them
only; one that follows the epochs, a count of the data and not of the machine, is right for both: ``--dropout``
holds until ``--dropout-rise-epochs`` A,B's epoch A, then rises linearly to ``--dropout-final`` at epoch B and
stays there. The rate of an epoch depends on its number alone, so a resumed run (which restarts inside its epoch)
and a run on another CPU use the same rate at the same epoch.

It sets ``p`` of the model's ``--dropout`` modules: the ``nn.Dropout`` attributes named ``dropout`` (embeddings and
sub-layer outputs, ``nmt.models``); attention, activation and word dropout keep their own rates.
"""

from __future__ import annotations

from torch import nn

from nmt.config.model import ModelConfig
from nmt.errors import ConfigError


def rise_epochs(cfg: ModelConfig) -> tuple[int, int]:
    """``--dropout-rise-epochs A,B``: the epochs A < B between which the rate rises (a one-line error otherwise)."""
    text = str(cfg.dropout_rise_epochs)
    parts = [part.strip() for part in text.split(",")]
    try:
        start, end = (int(part) for part in parts)
    except ValueError:
        start = end = 0
    if not 1 <= start < end:
        raise ConfigError(f"--dropout-rise-epochs {text}: give two epochs A,B with 1 <= A < B, e.g. "
                          "--dropout-rise-epochs 10,30 (the rate rises from --dropout at epoch A to "
                          "--dropout-final at epoch B)")
    return start, end


def check_dropout_schedule(cfg: ModelConfig) -> None:
    """Refuse a wrong ``--dropout-rise-epochs`` before anything is written (only read with ``--dropout-final``)."""
    if cfg.dropout_final is not None:
        rise_epochs(cfg)


def dropout_at(cfg: ModelConfig, epoch: int) -> float:
    """The ``--dropout`` rate of epoch ``epoch`` (1-based): constant without ``--dropout-final``."""
    if cfg.dropout_final is None:
        return float(cfg.dropout)
    start, end = rise_epochs(cfg)
    share = min(max((epoch - start) / (end - start), 0.0), 1.0)
    return float(cfg.dropout) + share * (float(cfg.dropout_final) - float(cfg.dropout))


def dropout_modules(model: nn.Module) -> list[nn.Dropout]:
    """The ``--dropout`` modules of ``model``: its ``nn.Dropout`` attributes named ``dropout``."""
    return [module for name, module in model.named_modules()
            if name.rsplit(".", 1)[-1] == "dropout" and isinstance(module, nn.Dropout)]


def check_model_has_dropout(model: nn.Module, cfg: ModelConfig) -> None:
    """With ``--dropout-final``, refuse a model (an architecture plugin's) with no module it could act on."""
    if cfg.dropout_final is not None and not dropout_modules(model):
        raise ConfigError(f"--dropout-final: architecture {cfg.arch['name']} has no --dropout modules (nn.Dropout "
                          "attributes named 'dropout') to follow it; drop --dropout-final")


def set_dropout(model: nn.Module, rate: float) -> int:
    """Give every ``--dropout`` module of ``model`` the rate ``rate``; returns how many there are."""
    modules = dropout_modules(model)
    for module in modules:
        module.p = rate
    return len(modules)
