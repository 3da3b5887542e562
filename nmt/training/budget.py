"""The training budget and how much of it is spent: progress p in [0, 1], what schedules that follow the
budget (``--lr-scheduler linear|wsd|cosine_budget``) and ``--save-at-progress`` read.

A budget is ``--stop-time-hours`` (seconds of training), ``--max-update`` (updates), or both. With both, p is the
larger of the two shares, so p reaches 1 when the first of the two limits, the one that stops the run, is reached.

Training time is the clock of ``--stop-time-hours``, :class:`TrainingClock`: seconds spent training, summed over
resumes, without the time spent validating and writing checkpoints. Two runs of one time budget make different
numbers of updates (another machine, another load); an update budget makes the same updates every time.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from nmt.errors import ConfigError

if TYPE_CHECKING:
    from nmt.config.train import TrainJob


@dataclass(frozen=True)
class Budget:
    """``max_update`` updates and/or ``seconds`` of training (0: that limit is off)."""

    max_update: int = 0
    seconds: float = 0.0

    @classmethod
    def of(cls, cfg: TrainJob) -> Budget:
        opt = cfg.optimization
        return cls(int(opt.max_update), float(opt.stop_time_hours) * 3600.0)

    def __bool__(self) -> bool:
        return self.max_update > 0 or self.seconds > 0

    def progress(self, num_updates: int, train_seconds: float) -> float:
        """The share of the budget spent after ``num_updates`` updates and ``train_seconds`` of training, in
        [0, 1] (0 without a budget): the larger share when both limits are set."""
        shares = []
        if self.max_update > 0:
            shares.append(num_updates / self.max_update)
        if self.seconds > 0:
            shares.append(train_seconds / self.seconds)
        return min(max(shares, default=0.0), 1.0)


def parse_progress_points(text: str) -> list[float]:
    """``--save-at-progress 0.92,0.94,1``: the points, sorted, each in (0, 1]."""
    points = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        try:
            value = float(item)
        except ValueError:
            value = float("nan")
        if not 0 < value <= 1:  # NaN fails too
            raise ConfigError(f"--save-at-progress {text}: {item!r} is not a share of the budget in (0, 1]; give "
                              "e.g. --save-at-progress 0.92,0.94,0.96,0.98,1")
        points.append(value)
    return sorted(set(points))


def check_budget(cfg: TrainJob) -> list[float]:
    """Refuse what needs a budget without one (an LR schedule that follows it, --save-at-progress); returns the
    ``--save-at-progress`` points."""
    from nmt.registry import LR_SCHEDULER

    points = parse_progress_points(cfg.checkpoint.save_at_progress)
    if Budget.of(cfg):
        return points
    scheduler = cfg.lr_scheduler["name"]
    if getattr(LR_SCHEDULER.get(scheduler), "follows_budget", False):
        raise ConfigError(f"--lr-scheduler {scheduler} follows the training budget: give --stop-time-hours H "
                          "(a time budget) or --max-update N (an update budget; exactly reproducible)")
    if points:
        raise ConfigError(f"--save-at-progress {cfg.checkpoint.save_at_progress}: progress is a share of the "
                          "training budget; give --stop-time-hours H or --max-update N")
    return points


class TrainingClock:
    """Seconds of training of the run, summed over resumes (``before``: what earlier processes trained), with
    validation and checkpoint writing left out (:meth:`paused`)."""

    def __init__(self, before: float = 0.0):
        self.before = float(before)
        self._started = time.perf_counter()
        self._paused_for = 0.0
        self._paused_at: float | None = None

    def seconds(self) -> float:
        now = self._paused_at if self._paused_at is not None else time.perf_counter()
        return self.before + now - self._started - self._paused_for

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside does not count as training (nested pauses count once)."""
        if self._paused_at is not None:
            yield
            return
        self._paused_at = time.perf_counter()
        try:
            yield
        finally:
            self._paused_for += time.perf_counter() - self._paused_at
            self._paused_at = None
