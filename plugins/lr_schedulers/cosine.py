"""Linear warmup, then one half-cosine from --lr down to --min-lr (Loshchilov & Hutter, no restarts)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from nmt.errors import ConfigError
from nmt.fields import opt
from nmt.registry import register_lr_scheduler
from nmt.training.lr_scheduler import LRScheduler, WarmupConfig, linear_warmup, warmup_start_lr


@dataclass
class CosineConfig(WarmupConfig):
    min_lr: float = opt(0.0, "Learning rate the cosine ends at (and stays at afterwards).", low=0)
    lr_period_updates: int = opt(-1, "Updates the cosine decay lasts (-1 = --max-update minus the warmup).", low=-1)


@register_lr_scheduler("cosine", config=CosineConfig)
class CosineSchedule(LRScheduler[CosineConfig]):
    """lr(n) = min_lr + (lr - min_lr) * (1 + cos(pi * (n - warmup) / period)) / 2 after the warmup."""

    def __init__(self, cfg: CosineConfig, optimizer: torch.optim.Optimizer, base_lr: float,
                 model_dim: int = 512, max_update: int = 0):
        self.warmup = max(int(cfg.warmup_updates), 0)
        self.init_lr = warmup_start_lr(cfg.warmup_init_lr, self.warmup, base_lr)
        self.min_lr = float(cfg.min_lr)
        if cfg.lr_period_updates > 0:
            self.period = int(cfg.lr_period_updates)
        elif max_update and max_update > self.warmup:
            self.period = int(max_update) - self.warmup
        else:
            raise ConfigError("--lr-scheduler cosine needs --max-update (larger than --warmup-updates) "
                              "or --lr-period-updates to know how long the decay lasts")
        if self.min_lr > base_lr:
            raise ConfigError(f"--min-lr {self.min_lr}: must not exceed --lr {base_lr}")
        super().__init__(cfg, optimizer, base_lr, model_dim, max_update)

    def lr_at(self, num_updates: int) -> float:
        if num_updates < self.warmup:
            return linear_warmup(num_updates, self.init_lr, self.base_lr, self.warmup)
        progress = min((num_updates - self.warmup) / self.period, 1.0)
        return self.min_lr + 0.5 * (self.base_lr - self.min_lr) * (1.0 + math.cos(math.pi * progress))
