"""Linear warmup, then one half-cosine from --lr down to 0 as the training budget ends.

A plugin of its own rather than an option of ``cosine``: ``cosine`` is a function of the update count whose
length is given in updates (--lr-period-updates, or --max-update), and stays exactly that; this one reads
only the progress through the budget, so the same recipe anneals on time on any machine."""

from __future__ import annotations

import math
from dataclasses import dataclass

from nmt.registry import register_lr_scheduler
from nmt.training.lr_scheduler import BudgetSchedule, WarmupConfig


@dataclass
class CosineBudgetConfig(WarmupConfig):
    """A warmup, then a half-cosine to 0 over the rest of the budget (--stop-time-hours and/or --max-update)."""


@register_lr_scheduler("cosine_budget", config=CosineBudgetConfig)
class CosineBudgetSchedule(BudgetSchedule[CosineBudgetConfig]):
    """Linear warmup, then a half-cosine to 0 when the training budget ends (--stop-time-hours / --max-update)."""

    def decay(self, progress: float, since_warmup: float) -> float:
        return 0.5 * (1.0 + math.cos(math.pi * since_warmup))
