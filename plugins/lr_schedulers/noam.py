"""The paper's schedule (Vaswani et al. 2017, section 5.3), with --lr as a factor."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nmt.fields import opt
from nmt.registry import register_lr_scheduler
from nmt.training.lr_scheduler import LRScheduler


@dataclass
class NoamConfig:
    warmup_updates: int = opt(4000, "Updates of linear warmup before the schedule's decay.", low=1)


@register_lr_scheduler("noam", config=NoamConfig)
class NoamSchedule(LRScheduler[NoamConfig]):
    """lr(n) = --lr * d_model^-0.5 * min(n^-0.5, n * warmup^-1.5); peaks at n = warmup.

    The paper counts steps from 1, so n = 0 (before the first update) is read as 1: the first
    update gets a small positive rate rather than zero. Use --lr 1 (or 2, as tensor2tensor did)."""

    def __init__(self, cfg: NoamConfig, optimizer: torch.optim.Optimizer, base_lr: float,
                 model_dim: int = 512, max_update: int = 0):
        self.warmup = int(cfg.warmup_updates)
        super().__init__(cfg, optimizer, base_lr, model_dim, max_update)

    def lr_at(self, num_updates: int) -> float:
        step = max(num_updates, 1)
        return self.base_lr * self.model_dim ** -0.5 * min(step ** -0.5, step * self.warmup ** -1.5)
