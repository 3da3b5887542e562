"""Adam (Kingma & Ba). fairseq's defaults; the paper used --adam-betas '(0.9,0.98)' --adam-eps 1e-9."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from nmt.config.fields import opt
from nmt.registry import register_optimizer
from nmt.training.optimizer import parse_floats, with_fast_kernel


@dataclass
class AdamConfig:
    adam_betas: str = opt("(0.9, 0.999)", "Adam's beta1 and beta2, written as a tuple: '(0.9,0.98)'.")
    adam_eps: float = opt(1e-8, "Adam's epsilon (added to the root of the second moment).")
    weight_decay: float = opt(0.0, "Weight decay (adam, sgd: an L2 term added to the gradient; "
                                    "adamw: decoupled from it).")


@register_optimizer("adam", config=AdamConfig)
def build_adam(cfg: AdamConfig, params: list[Any], lr: float) -> torch.optim.Optimizer:
    """Adam with L2 weight decay added to the gradient (torch.optim.Adam, fused or foreach kernel)."""
    betas = parse_floats(cfg.adam_betas, "--adam-betas", count=2)
    return with_fast_kernel(torch.optim.Adam, params, lr=lr, betas=betas, eps=cfg.adam_eps,
                            weight_decay=cfg.weight_decay)
