"""Learning-rate schedules: the base class the ``--lr-scheduler`` plugins extend, and their builder.

A schedule is a pure function of the number of updates done, so resuming needs only that number
and the learning rate of every update is the same whether or not training was interrupted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic

import torch

from nmt.fields import opt
from nmt.registry import LR_SCHEDULER, OptionsT


@dataclass
class WarmupConfig:
    """The options of a schedule that starts with a linear warmup (inverse_sqrt, cosine)."""

    warmup_updates: int = opt(4000, "Updates of linear warmup before the schedule's decay.", low=0)
    warmup_init_lr: float = opt(-1.0, "Learning rate the warmup starts from (-1 = 0, or --lr when there is no warmup).",
                                low=-1)


class LRScheduler(Generic[OptionsT]):
    """Sets the optimizer's learning rate before each update; ``cfg`` is the schedule's own options (the type
    argument: ``LRScheduler[InverseSqrtConfig]``).

    ``base_lr`` is ``--lr`` (the peak, or the factor for noam); ``model_dim`` is d_model (noam);
    ``max_update`` is ``--max-update`` (0 = unknown; cosine needs it or ``--lr-period-updates``).
    ``step_update(n)`` is called with ``n`` = updates done so far and sets the learning rate the
    next update uses; the constructor applies ``step_update(0)``."""

    def __init__(self, cfg: OptionsT, optimizer: torch.optim.Optimizer, base_lr: float, model_dim: int = 512,
                 max_update: int = 0):
        self.cfg = cfg
        self.optimizer = optimizer
        self.base_lr = float(base_lr)
        self.model_dim = int(model_dim)
        self.max_update = int(max_update or 0)
        self.num_updates = 0
        self.step_update(0)

    def lr_at(self, num_updates: int) -> float:
        """The learning rate after ``num_updates`` updates (what the next update uses)."""
        raise NotImplementedError

    def step_update(self, num_updates: int) -> float:
        self.num_updates = int(num_updates)
        lr = float(self.lr_at(self.num_updates))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def step_epoch(self, epoch: int, val_loss: float | None = None) -> float:
        """Called at the end of an epoch; the built-in schedules depend on updates only."""
        return self.get_lr()

    def get_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def state_dict(self) -> dict[str, Any]:
        return {"num_updates": self.num_updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step_update(int(state.get("num_updates", 0)))


def warmup_start_lr(warmup_init_lr: float, warmup_updates: int, base_lr: float) -> float:
    """fairseq's reading of ``--warmup-init-lr -1``: start at 0 with a warmup, at --lr without one."""
    if warmup_init_lr >= 0:
        return float(warmup_init_lr)
    return 0.0 if warmup_updates > 0 else float(base_lr)


def linear_warmup(num_updates: int, start_lr: float, peak_lr: float, warmup_updates: int) -> float:
    """The learning rate ``num_updates`` into a linear ramp from ``start_lr`` to ``peak_lr`` (for ``n < warmup``)."""
    return start_lr + num_updates * (peak_lr - start_lr) / warmup_updates


def build_lr_scheduler(group: dict[str, Any], optimizer: torch.optim.Optimizer, base_lr: float,
                       model_dim: int = 512, max_update: int = 0) -> LRScheduler[Any]:
    """The scheduler a plugin group names (``{"name": "inverse_sqrt", "warmup_updates": 4000, ...}``)."""
    return LR_SCHEDULER.build(group["name"], group, optimizer, base_lr, model_dim, max_update)
