"""fairseq's inverse_sqrt: linear warmup to --lr, then decay with the inverse square root of the update."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from nmt.registry import register_lr_scheduler
from nmt.training.lr_scheduler import LRScheduler, WarmupConfig, linear_warmup, warmup_start_lr


@dataclass
class InverseSqrtConfig(WarmupConfig):
    """A warmup, then decay with the inverse square root of the update number."""

@register_lr_scheduler("inverse_sqrt", config=InverseSqrtConfig)
class InverseSqrtSchedule(LRScheduler[InverseSqrtConfig]):
    """lr(n) = init + n * (lr - init) / warmup for n < warmup, then lr * sqrt(warmup) / sqrt(n)."""

    def __init__(self, cfg: InverseSqrtConfig, optimizer: torch.optim.Optimizer, base_lr: float,
                 model_dim: int = 512, max_update: int = 0):
        self.warmup = int(cfg.warmup_updates)
        self.init_lr = warmup_start_lr(cfg.warmup_init_lr, self.warmup, base_lr)
        super().__init__(cfg, optimizer, base_lr, model_dim, max_update)

    def lr_at(self, num_updates: int) -> float:
        if num_updates < self.warmup:
            return linear_warmup(num_updates, self.init_lr, self.base_lr, self.warmup)
        return self.base_lr * math.sqrt(max(self.warmup, 1)) / math.sqrt(max(num_updates, 1))
