"""AdamW: Adam with weight decay decoupled from the gradient (Loshchilov & Hutter)."""

from __future__ import annotations

from typing import Any

import torch

from nmt.plugins.optimizers.adam import AdamConfig
from nmt.registry import register_optimizer
from nmt.training.optimizer import parse_floats, with_fast_kernel


@register_optimizer("adamw", config=AdamConfig)
def build_adamw(cfg: AdamConfig, params: list[Any], lr: float) -> torch.optim.Optimizer:
    """AdamW (torch.optim.AdamW, fused or foreach kernel); same options as adam."""
    betas = parse_floats(cfg.adam_betas, "--adam-betas", count=2)
    return with_fast_kernel(torch.optim.AdamW, params, lr=lr, betas=betas, eps=cfg.adam_eps,
                            weight_decay=cfg.weight_decay)
