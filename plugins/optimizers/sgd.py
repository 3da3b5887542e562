"""Stochastic gradient descent, with optional (Nesterov) momentum."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from nmt.errors import ConfigError
from nmt.fields import opt
from nmt.registry import register_optimizer
from nmt.training.optimizer import init_with_fast_kernel


@dataclass
class SGDConfig:
    momentum: float = opt(0.0, "SGD momentum factor (0 = plain SGD).", low=0)
    nesterov: bool = opt(False, "Use Nesterov momentum (needs --momentum > 0).")
    weight_decay: float = opt(0.0, "Weight decay (adam, sgd: an L2 term added to the gradient; "
                                    "adamw: decoupled from it).", low=0)


@register_optimizer("sgd", config=SGDConfig)
class SGD(torch.optim.SGD):
    """torch.optim.SGD with the fused or foreach kernel."""

    def __init__(self, cfg: SGDConfig, params: list[Any], lr: float):
        if cfg.nesterov and cfg.momentum <= 0:
            raise ConfigError("--nesterov needs --momentum > 0 (e.g. --momentum 0.9)")
        init_with_fast_kernel(super().__init__, params, lr=lr, momentum=cfg.momentum, nesterov=cfg.nesterov,
                              weight_decay=cfg.weight_decay)
