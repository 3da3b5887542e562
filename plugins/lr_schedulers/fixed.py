"""A constant learning rate (--lr throughout)."""

from __future__ import annotations

from dataclasses import dataclass

from nmt.registry import register_lr_scheduler
from nmt.training.lr_scheduler import LRScheduler


@dataclass
class FixedConfig:
    """fixed has no options of its own."""


@register_lr_scheduler("fixed", config=FixedConfig)
class FixedSchedule(LRScheduler[FixedConfig]):
    """lr(n) = --lr."""

    def lr_at(self, num_updates: int) -> float:
        return self.base_lr
