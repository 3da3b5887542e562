"""Linear warmup, then a straight line from --lr down to 0 as the training budget ends."""

from __future__ import annotations

from dataclasses import dataclass

from nmt.registry import register_lr_scheduler
from nmt.training.lr_scheduler import BudgetSchedule, WarmupConfig


@dataclass
class LinearConfig(WarmupConfig):
    """A warmup, then linear decay to 0 over the rest of the budget (--stop-time-hours and/or --max-update)."""


@register_lr_scheduler("linear", config=LinearConfig)
class LinearSchedule(BudgetSchedule[LinearConfig]):
    """Linear warmup, then linear decay to 0 when the training budget ends (--stop-time-hours / --max-update)."""

    def decay(self, progress: float, since_warmup: float) -> float:
        return 1.0 - since_warmup
