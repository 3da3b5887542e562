"""Learning-rate schedules: the base class the ``--lr-scheduler`` plugins extend, and their builder.

A schedule is a pure function of the number of updates done and, for the schedules that follow the training
budget (``follows_budget``: linear, wsd, cosine_budget), of the progress p in [0, 1] through that budget
(``nmt.training.budget``). Both are saved in the checkpoint, so the learning rate of every update is the same
whether or not training was interrupted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

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
    ``step_update(n, p)`` is called with ``n`` = updates done so far and ``p`` = the progress through the
    training budget (None: unchanged) and sets the learning rate the next update uses; the constructor
    applies ``step_update(0, 0.0)``. A schedule of updates only implements ``lr_at(n)``; one that follows the
    budget sets ``follows_budget = True`` and implements ``lr_at_progress(n, p)``."""

    follows_budget: ClassVar[bool] = False  # True: nmt-train refuses it without --stop-time-hours / --max-update

    def __init__(self, cfg: OptionsT, optimizer: torch.optim.Optimizer, base_lr: float, model_dim: int = 512,
                 max_update: int = 0):
        self.cfg = cfg
        self.optimizer = optimizer
        self.base_lr = float(base_lr)
        self.model_dim = int(model_dim)
        self.max_update = int(max_update or 0)
        self.num_updates = 0
        self.progress = 0.0
        self.step_update(0, 0.0)

    def lr_at(self, num_updates: int) -> float:
        """The learning rate after ``num_updates`` updates (what the next update uses)."""
        raise NotImplementedError

    def lr_at_progress(self, num_updates: int, progress: float) -> float:
        """The learning rate after ``num_updates`` updates at ``progress`` through the budget; a schedule of
        updates only ignores the progress."""
        return self.lr_at(num_updates)

    def step_update(self, num_updates: int, progress: float | None = None) -> float:
        self.num_updates = int(num_updates)
        if progress is not None:
            self.progress = min(max(float(progress), 0.0), 1.0)
        lr = float(self.lr_at_progress(self.num_updates, self.progress))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def step_epoch(self, epoch: int, val_loss: float | None = None) -> float:
        """Called at the end of an epoch; the built-in schedules depend on updates and progress only."""
        return self.get_lr()

    def get_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def state_dict(self) -> dict[str, Any]:
        return {"num_updates": self.num_updates, "progress": self.progress}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A state without ``progress`` (written before schedules followed the budget) keeps the current one."""
        progress = state.get("progress")
        self.step_update(int(state.get("num_updates", 0)), None if progress is None else float(progress))


def warmup_start_lr(warmup_init_lr: float, warmup_updates: int, base_lr: float) -> float:
    """fairseq's reading of ``--warmup-init-lr -1``: start at 0 with a warmup, at --lr without one."""
    if warmup_init_lr >= 0:
        return float(warmup_init_lr)
    return 0.0 if warmup_updates > 0 else float(base_lr)


def linear_warmup(num_updates: int, start_lr: float, peak_lr: float, warmup_updates: int) -> float:
    """The learning rate ``num_updates`` into a linear ramp from ``start_lr`` to ``peak_lr`` (for ``n < warmup``)."""
    return start_lr + num_updates * (peak_lr - start_lr) / warmup_updates


WarmupT = TypeVar("WarmupT", bound=WarmupConfig)


class BudgetSchedule(LRScheduler[WarmupT]):
    """A linear warmup over ``--warmup-updates`` updates to --lr, then a decay that follows the training budget
    (``decay(p, q)``, a factor in [0, 1]). ``q`` is the progress since the warmup ended, rescaled to [0, 1]: the
    warmup ends at an update count, but at a share of a time budget no one can know before the run, so that
    share (``warmup_end``) is recorded when it ends and saved with the schedule."""

    follows_budget = True

    def __init__(self, cfg: WarmupT, optimizer: torch.optim.Optimizer, base_lr: float, model_dim: int = 512,
                 max_update: int = 0):
        self.warmup = max(int(cfg.warmup_updates), 0)
        self.init_lr = warmup_start_lr(cfg.warmup_init_lr, self.warmup, base_lr)
        self.warmup_end: float | None = None  # the progress at which the warmup ended (None: not yet)
        super().__init__(cfg, optimizer, base_lr, model_dim, max_update)

    def decay(self, progress: float, since_warmup: float) -> float:
        """The share of --lr after the warmup, at ``progress`` through the budget (``since_warmup``: the progress
        since the warmup ended, in [0, 1])."""
        raise NotImplementedError

    def lr_at_progress(self, num_updates: int, progress: float) -> float:
        if num_updates < self.warmup or self.warmup_end is None:
            return linear_warmup(num_updates, self.init_lr, self.base_lr, self.warmup)
        rest = 1.0 - self.warmup_end
        since = min(max((progress - self.warmup_end) / rest, 0.0), 1.0) if rest > 0 else 1.0
        return self.base_lr * self.decay(progress, since)

    def step_update(self, num_updates: int, progress: float | None = None) -> float:
        if self.warmup_end is None and num_updates >= self.warmup:
            now = self.progress if progress is None else min(max(float(progress), 0.0), 1.0)
            # at the warmup's last update this is the progress itself; a run resumed past it without the
            # record (--reset-lr-scheduler) takes the progress of an update as the same at every update
            self.warmup_end = now * self.warmup / max(int(num_updates), 1)
        return super().step_update(num_updates, progress)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "warmup_end": self.warmup_end}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        end = state.get("warmup_end")
        self.warmup_end = None if end is None else float(end)
        super().load_state_dict(state)


def build_lr_scheduler(group: dict[str, Any], optimizer: torch.optim.Optimizer, base_lr: float,
                       model_dim: int = 512, max_update: int = 0) -> LRScheduler[Any]:
    """The scheduler a plugin group names (``{"name": "inverse_sqrt", "warmup_updates": 4000, ...}``)."""
    return LR_SCHEDULER.build(group["name"], group, optimizer, base_lr, model_dim, max_update)
