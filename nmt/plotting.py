"""Training curves from the JSON log nmt-train writes: loss (bits), perplexity and learning rate
per update, for one run or several overlaid (e.g. sinusoidal vs learned positions).

matplotlib is an optional extra (``pip install 'nmt[plot]'``); it is imported only when drawing.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeGuard

from nmt.errors import DataError, NmtError, UsageError
from nmt.fileio import atomic_write, bounded_lines
from nmt.training.train_log import JSON_LOG

MAX_LINE_BYTES = 1 << 20  # a log record is a few hundred bytes: a longer line is not one
NUMBER_KEYS = ("num_updates", "loss", "ppl", "lr")  # what the panels draw


@dataclass
class Curve:
    """One line: x = update number, y = the metric."""

    updates: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


@dataclass
class RunCurves:
    """What one run's log gives to the three panels."""

    label: str
    train_loss: Curve
    train_ppl: Curve
    valid_loss: Curve
    valid_ppl: Curve
    lr: Curve


def log_path(path: str | Path) -> Path:
    """``path`` itself, or ``path/train_log.jsonl`` for a run folder; a missing one is a usage error."""
    path = Path(path)
    candidate = path / JSON_LOG if path.is_dir() else path
    if not candidate.is_file():
        raise UsageError(f"{candidate}: no such training log; give the {JSON_LOG} nmt-train wrote, "
                         "or its --save-dir folder")
    return candidate


def _log_warning(message: str) -> None:
    logging.getLogger(__name__).warning(message)


def read_log(path: Path, warn: Callable[[str], None] = _log_warning) -> list[dict[str, Any]]:
    """The JSON records of a log. A damaged line (cut off by a kill, edited, binary, too long, or with a
    non-number where a curve needs a number) is skipped with a warning naming it and nothing of its
    content, so one bad line does not cost the whole curve; a log without any record is one error.
    Lines are read bounded: a huge one is not held in memory."""
    records, problems = [], []
    with open(path, "rb") as f:
        for number, raw in enumerate(bounded_lines(f, MAX_LINE_BYTES), 1):
            record, problem = _record(raw)
            if problem:
                problems.append(f"{path}:{number}: {problem}; line skipped")
            elif record is not None:
                records.append(record)
    if not records:
        what = f"{problems[0].removesuffix('; line skipped')}, and no line is a record" if problems else \
            f"{path}: the log is empty"
        raise DataError(f"{what}; give the {JSON_LOG} nmt-train wrote, after --log-interval updates")
    for problem in problems:
        warn(problem)
    return records


def _record(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    """One log line as (record, "") or (None, what is wrong with it); (None, "") for a blank line.
    Values are checked where the curves need them (``_curve``): a non-finite figure is logged as null."""
    if len(raw) > MAX_LINE_BYTES:
        return None, f"a line longer than {MAX_LINE_BYTES >> 20} MB"
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8 text (binary data?)"
    if not line.strip():
        return None, ""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        return None, f"not a JSON line ({e.msg})"
    if not isinstance(record, dict) or "kind" not in record:
        return None, 'a record without "kind"'
    for key in NUMBER_KEYS:  # null stands for a figure that was not finite when logged
        value = record.get(key)
        if value is not None and not _is_number(value):
            return None, f'"{key}" is not a number'
    return record, ""


def _curve(records: list[dict[str, Any]], key: str) -> Curve:
    """Values of ``key`` by update; a resumed run may log an update twice, the later record wins."""
    by_update: dict[int, float] = {}
    for r in records:
        value, update = r.get(key), r.get("num_updates")
        if _is_number(value) and _is_number(update) and math.isfinite(value):  # null: not finite when logged
            by_update[int(update)] = float(value)
    updates = sorted(by_update)
    return Curve(updates, [by_update[u] for u in updates])


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def run_curves(records: list[dict[str, Any]], label: str, valid_subset: str = "valid") -> RunCurves:
    """Train curves from the frequent ``train_inner`` lines (epoch summaries when there are none)."""
    train = [r for r in records if r["kind"] == "train_inner"] or [r for r in records if r["kind"] == "train"]
    valid = [r for r in records if r["kind"] == "valid" and r.get("subset", "valid") == valid_subset]
    return RunCurves(label, _curve(train, "loss"), _curve(train, "ppl"), _curve(valid, "loss"),
                     _curve(valid, "ppl"), _curve(train, "lr"))


def default_labels(paths: list[Path]) -> list[str]:
    """Each run's folder name; the full folder when two runs share a name."""
    names = [p.parent.name or str(p.parent) for p in paths]
    if len(set(names)) < len(names):
        names = [str(p.parent) for p in paths]
    return names


def _pyplot_free_figure(width: float, height: float) -> Any:
    """A matplotlib Figure drawn with the Agg canvas: no GUI backend, no global pyplot state."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise NmtError("plotting needs matplotlib: pip install 'nmt[plot]'") from None
    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    return figure


def draw(runs: list[RunCurves], output: str | Path, *, linear_ppl: bool = False, title: str | None = None,
         dpi: int = 100) -> Path:
    """Write a PNG with three panels (loss in bits, perplexity, learning rate) against updates."""
    figure = _pyplot_free_figure(15, 4.5)
    loss_ax, ppl_ax, lr_ax = figure.subplots(1, 3)
    colors = [f"C{i % 10}" for i in range(len(runs))]
    for run, color in zip(runs, colors):
        for ax, train, valid in ((loss_ax, run.train_loss, run.valid_loss), (ppl_ax, run.train_ppl, run.valid_ppl)):
            ax.plot(train.updates, train.values, color=color, label=f"{run.label} train")
            if valid.updates:
                ax.plot(valid.updates, valid.values, color=color, linestyle="--", marker="o", markersize=3,
                        label=f"{run.label} valid")
        lr_ax.plot(run.lr.updates, run.lr.values, color=color, label=run.label)
    loss_ax.set_ylabel("loss (bits per token)")
    ppl_ax.set_ylabel("perplexity")
    if not linear_ppl:  # early perplexities are thousands, late ones single digits
        ppl_ax.set_yscale("log")
    lr_ax.set_ylabel("learning rate")
    for ax in (loss_ax, ppl_ax, lr_ax):
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    output = Path(output)
    with atomic_write(output, "wb") as f:
        figure.savefig(f, format="png", dpi=dpi)
    return output
