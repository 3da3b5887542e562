"""AdamW: Adam with weight decay decoupled from the gradient (Loshchilov & Hutter)."""

from __future__ import annotations

from typing import Any

import torch

from nmt.plugins.optimizers.adam import AdamConfig
from nmt.registry import register_optimizer
from nmt.training.optimizer import init_with_fast_kernel, parse_betas


@register_optimizer("adamw", config=AdamConfig)
class AdamW(torch.optim.AdamW):
    """AdamW (torch.optim.AdamW, fused or foreach kernel); same options as adam."""

    def __init__(self, cfg: AdamConfig, params: list[Any], lr: float):
        init_with_fast_kernel(super().__init__, params, lr=lr, betas=parse_betas(cfg.adam_betas, "--adam-betas"),
                              eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
