"""Warmup-stable-decay: linear warmup, --lr held, then a (1 - sqrt) cooldown to 0 over the budget's last
--cooldown-fraction (Hägele et al. 2024 found this cooldown as good as a cosine of the same length)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from nmt.fields import opt
from nmt.registry import register_lr_scheduler
from nmt.training.lr_scheduler import BudgetSchedule, WarmupConfig


@dataclass
class WsdConfig(WarmupConfig):
    cooldown_fraction: float = opt(0.2, "Share of the training budget, at its end, over which the learning rate "
                                        "falls from --lr to 0.", low=0, high=1, low_open=True)


@register_lr_scheduler("wsd", config=WsdConfig)
class WsdSchedule(BudgetSchedule[WsdConfig]):
    """Warmup, --lr held, then lr * (1 - sqrt(c)) over the budget's last --cooldown-fraction (c: 0 -> 1 there)."""

    def decay(self, progress: float, since_warmup: float) -> float:
        fraction = float(self.cfg.cooldown_fraction)
        into_cooldown = (progress - (1.0 - fraction)) / fraction
        return 1.0 - math.sqrt(min(max(into_cooldown, 0.0), 1.0))
