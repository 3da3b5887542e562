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

    def state_dict(self) -> dict[str, Any]:
        """The sums so far, for a checkpoint taken inside an epoch: the resumed run's next log lines then
        show the same figures as a run that never stopped."""
        return {"sums": dict(self.sums), "updates": self.updates, "gnorm_sum": self.gnorm_sum,
                "clipped": self.clipped, "train_time": self.train_time,
                "last": {k: self.last.get(k) for k in ("lr", "loss_scale")}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.reset()
        self.sums.update({k: float(v) for k, v in state["sums"].items() if k in self.sums})
        self.updates = int(state["updates"])
        self.gnorm_sum = float(state["gnorm_sum"])
        self.clipped = int(state["clipped"])
        self.train_time = float(state["train_time"])
        self.last = dict(state.get("last") or {})

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


_BATCHES = "valid_batches"  # the batch count's key among the totals summed over the ranks


class ValidMeter:
    """Sums of the validation batches' logging outputs (the criterion's ``logged_sums``) and their count.
    Under several ranks each meter sees its own share of the batches; :meth:`totals` and
    :meth:`set_totals` carry both over one all-reduce, so every figure is the single process's."""

    def __init__(self, criterion: Criterion) -> None:
        self.criterion = criterion
        self.sums = dict.fromkeys(criterion.logged_sums, 0.0)
        self.batches = 0
        self.start = time.perf_counter()

    def add(self, stats: dict[str, Any]) -> None:
        for k in self.sums:
            self.sums[k] += float(stats.get(k, 0.0))
        self.batches += 1

    def totals(self) -> dict[str, float]:
        """This meter's sums and batch count, to be summed over the ranks."""
        return {**self.sums, _BATCHES: float(self.batches)}

    def set_totals(self, totals: dict[str, float]) -> None:
        """Take the sums and batch count of every rank (what :meth:`totals` gave, all-reduced)."""
        self.sums = {k: float(totals[k]) for k in self.sums}
        self.batches = int(round(totals[_BATCHES]))

    def summary(self, num_updates: int) -> dict[str, Any]:
        seconds = max(time.perf_counter() - self.start, 1e-9)
        out: dict[str, Any] = self.criterion.reduce_metrics(self.sums)
        n = max(self.batches, 1)
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
