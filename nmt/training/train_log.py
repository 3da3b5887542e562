"""Where training figures go: log lines on stderr, JSON lines in the save dir, TensorBoard events,
and a per-epoch progress bar. Only rank 0 makes any of them.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

from nmt.config.train import LoggingConfig
from nmt.training.metrics import format_value

logger = logging.getLogger("nmt.train")
JSON_LOG = "train_log.jsonl"


class _TqdmHandler(logging.StreamHandler):
    """Writes through tqdm so a log line does not tear a progress bar being drawn."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging must never kill training
            self.handleError(record)


def setup_console_logging(is_master: bool) -> None:
    """fairseq's line format (time | level | name | message); other ranks only show warnings."""
    root = logging.getLogger("nmt")
    if not any(isinstance(h, _TqdmHandler) for h in root.handlers):
        handler = _TqdmHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                                               "%Y-%m-%d %H:%M:%S"))
        root.addHandler(handler)
    root.setLevel(logging.INFO if is_master else logging.WARNING)


class TrainLog:
    """Sends each summary to the outputs that are on (console, JSON lines, TensorBoard)."""

    def __init__(self, cfg: LoggingConfig, save_dir: str | None, is_master: bool, no_progress_bar: bool):
        self.is_master = is_master
        self.format = cfg.log_format or "simple"
        self.progress_bar = is_master and not no_progress_bar and sys.stderr.isatty()
        self.json_path = Path(save_dir) / JSON_LOG if (is_master and save_dir) else None
        if self.json_path is not None:
            dropped = drop_partial_last_line(self.json_path)
            if dropped:
                logger.warning(f"{self.json_path}: dropped its last line ({dropped} bytes), cut off by an "
                               "interrupted run")
        self.tensorboard = _tensorboard_writer(cfg.tensorboard_logdir) if is_master else None
        self.start = time.time()

    def wall(self) -> float:
        return time.time() - self.start

    def emit(self, kind: str, epoch: int, stats: dict[str, Any], progress: str = "", subset: str = "") -> None:
        """One summary: kind is train_inner (every --log-interval), train (epoch end) or valid (per subset)."""
        if not self.is_master:
            return
        head = {"kind": kind, "epoch": epoch, **({"subset": subset} if subset else {})}
        if self.format == "simple":
            logger.info(_simple_line(kind, epoch, stats, progress, subset))
        elif self.format == "json":
            logger.info(_json_line({**head, **stats}))
        if self.json_path is not None:
            self.json_path.parent.mkdir(parents=True, exist_ok=True)
            append_line(self.json_path, _json_line({**head, "time": round(time.time(), 3), **stats}))
        if self.tensorboard is not None:
            step = int(stats.get("num_updates", 0))
            tag = subset if kind == "valid" and subset != "valid" else kind
            for key, value in stats.items():
                if isinstance(value, (int, float)) and key != "num_updates":
                    self.tensorboard.add_scalar(f"{tag}/{key}", value, step)
            self.tensorboard.flush()

    def info(self, message: str) -> None:
        if self.is_master:
            logger.info(message)

    def bar(self, batches: Iterable[Any], epoch: int, total: int, start: int = 0) -> Iterator[Any]:
        """The epoch's batches, drawn as a tqdm bar on a terminal."""
        if not self.progress_bar:
            yield from batches
            return
        from tqdm import tqdm

        with tqdm(batches, total=total, initial=start, desc=f"epoch {epoch:03d}", leave=False,
                  dynamic_ncols=True, file=sys.stderr) as bar:
            yield from bar

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()


def _json_line(record: dict[str, Any]) -> str:
    """Standard JSON (no NaN/Infinity, which strict readers refuse): a non-finite figure is null,
    as JavaScript writes it; floats rounded to 6 decimals."""
    def plain(v: Any) -> Any:
        if isinstance(v, float):
            return round(v, 6) if math.isfinite(v) else None
        return v

    return json.dumps({k: plain(v) for k, v in record.items()}, allow_nan=False)


def append_line(path: Path, line: str) -> None:
    """Append one line with a single unbuffered write: a kill leaves it whole, absent, or cut short at
    the very end of the file (which the next run drops), never interleaved with the next record."""
    data = memoryview((line + "\n").encode("utf-8"))
    with open(path, "ab", buffering=0) as f:
        while data:  # a regular file takes it in one write; loop in case the OS takes less
            data = data[f.write(data):]


def drop_partial_last_line(path: Path) -> int:
    """Cut a last line that has no newline (the run was killed during its append) off ``path``, so that
    the next append starts a line of its own; returns the bytes dropped (0: whole or missing file)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    keep = size
    with open(path, "rb") as f:
        while keep > 0:  # back from the end, 4 KB at a time, to the last newline
            start = max(0, keep - 4096)
            f.seek(start)
            chunk = f.read(keep - start)
            if keep == size and chunk.endswith(b"\n"):
                return 0
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            keep = start
    if keep < size:
        os.truncate(path, keep)
    return size - keep


def _simple_line(kind: str, epoch: int, stats: dict[str, Any], progress: str, subset: str) -> str:
    if kind == "train_inner":
        head = f"epoch {epoch:03d}: {progress} "
        body = ", ".join(f"{k}={format_value(k, v)}" for k, v in stats.items())
        return head + body
    label = f"valid on '{subset}' subset | " if subset else ""
    return f"epoch {epoch:03d} | {label}" + " | ".join(f"{k} {format_value(k, v)}" for k, v in stats.items())


def _tensorboard_writer(logdir: str | None) -> Any:
    if not logdir:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        logger.warning("--tensorboard-logdir %s is ignored: tensorboard is not installed "
                       "(pip install 'nmt[tensorboard]')", logdir)
        return None
    return SummaryWriter(logdir)
