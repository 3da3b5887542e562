"""Adam (Kingma & Ba). fairseq's defaults; the paper used --adam-betas '(0.9,0.98)' --adam-eps 1e-9."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from nmt.fields import opt
from nmt.registry import register_optimizer
from nmt.training.optimizer import init_with_fast_kernel, parse_betas


@dataclass
class AdamConfig:
    adam_betas: str = opt("(0.9, 0.999)", "Adam's beta1 and beta2, written as a tuple: '(0.9,0.98)'.")
    adam_eps: float = opt(1e-8, "Adam's epsilon (added to the root of the second moment).", low=0)
    weight_decay: float = opt(0.0, "Weight decay (adam, sgd: an L2 term added to the gradient; "
                                    "adamw: decoupled from it).", low=0)


@register_optimizer("adam", config=AdamConfig)
class Adam(torch.optim.Adam):
    """Adam with L2 weight decay added to the gradient (torch.optim.Adam, fused or foreach kernel)."""

    def __init__(self, cfg: AdamConfig, params: list[Any], lr: float):
        init_with_fast_kernel(super().__init__, params, lr=lr, betas=parse_betas(cfg.adam_betas, "--adam-betas"),
                              eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
