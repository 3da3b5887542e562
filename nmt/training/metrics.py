"""Meters: sums of what each update reports, turned into the figures a log line shows.

Losses are kept as sums (in nats) with their sample sizes, and divided only when a figure is
shown, so an interval's loss is the token-weighted mean, not a mean of per-batch means.
"""

from __future__ import annotations

import time
from typing import Any

from nmt.training.criterion import Criterion


class UpdateMeter:
    """Accumulates updates between two log lines (or over an epoch) and summarises them fairseq-style;
    the criterion says which figures are summed and what they reduce to."""

    def __init__(self, criterion: Criterion) -> None:
        self.criterion = criterion
        self.reset()

    def reset(self) -> None:
        self.sums = dict.fromkeys(self.criterion.logged_sums, 0.0)
        self.updates = 0
        self.gnorm_sum = 0.0
        self.clipped = 0
        self.train_time = 0.0
        self.last: dict[str, Any] = {}

    def add(self, stats: dict[str, Any], seconds: float) -> None:
        """One update's stats (sums over its batches and ranks, plus gnorm, clip, lr, loss_scale)."""
        for k in self.sums:
            self.sums[k] += float(stats.get(k, 0.0))
        self.updates += 1
        self.gnorm_sum += float(stats.get("gnorm", 0.0))
        self.clipped += int(bool(stats.get("clipped", False)))
        self.train_time += seconds
        self.last = stats

    def summary(self, num_updates: int, wall: float) -> dict[str, Any]:
        """The figures of a log line: loss, nll_loss, ppl, wps, ups, wpb, bsz, lr, gnorm, clip, ..."""
        n = max(self.updates, 1)
        seconds = max(self.train_time, 1e-9)
        out: dict[str, Any] = self.criterion.reduce_metrics(self.sums)
        out.update({
            "wps": self.sums["ntokens"] / seconds,
            "ups": self.updates / seconds,
            "wpb": self.sums["ntokens"] / n,
            "bsz": self.sums["nsentences"] / n,
            "num_updates": num_updates,
            "lr": self.last.get("lr", 0.0),
            "gnorm": self.gnorm_sum / n,
            "clip": 100.0 * self.clipped / n,
        })
        if self.last.get("loss_scale") is not None:
            out["loss_scale"] = self.last["loss_scale"]
        out["train_wall"] = self.train_time
        out["wall"] = wall
        return out


class ValidMeter:
    """Sums of the validation batches' logging outputs (the criterion's ``logged_sums``)."""

    def __init__(self, criterion: Criterion) -> None:
        self.criterion = criterion
        self.sums = dict.fromkeys(criterion.logged_sums, 0.0)
        self.batches = 0
        self.start = time.perf_counter()

    def add(self, stats: dict[str, Any]) -> None:
        for k in self.sums:
            self.sums[k] += float(stats.get(k, 0.0))
        self.batches += 1

    def summary(self, num_updates: int) -> dict[str, Any]:
        seconds = max(time.perf_counter() - self.start, 1e-9)
        out: dict[str, Any] = self.criterion.reduce_metrics(self.sums)
        n = max(self.batches, 1)  # this rank's batches; the sums are over all ranks
        out.update({"wps": self.sums["ntokens"] / seconds, "wpb": self.sums["ntokens"] / n,
                    "bsz": self.sums["nsentences"] / n, "num_updates": num_updates})
        return out


def format_value(key: str, value: Any) -> str:
    """How fairseq prints each figure: ints for counts/speeds, 3 decimals for losses, lr in %g."""
    if isinstance(value, str):
        return value
    if value is None:  # e.g. no best value yet
        return "-"
    if key in ("wps", "wpb", "bsz", "num_updates", "train_wall", "wall"):
        return str(int(round(value)))
    if key in ("lr", "loss_scale"):
        return f"{value:.4g}"
    if key in ("ppl", "bleu", "chrf", "best_bleu", "best_chrf"):
        return f"{value:.2f}"
    if key in ("clip",):
        return f"{value:.0f}"
    return f"{value:.3f}"
