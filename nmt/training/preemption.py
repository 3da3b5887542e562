"""Preemption: a scheduler's SIGTERM or SIGUSR1 makes nmt-train finish the update it is in, save
``checkpoint_last.pt`` and exit 0 with one line saying how to resume.

- The signal handler only records the signal; the training loop reads the record once per update, so
  a signal never cuts an update (all its accumulated batches), a validation or a checkpoint write in
  half. Repeats are ignored until the process exits (schedulers may signal every process of a job, or
  signal again and again while the checkpoint is written): after the run they stay ignored, so the process
  still ends with exit 0. Ctrl-C (SIGINT) still interrupts at once.
- Every rank must stop after the same update (one that stops alone leaves the others waiting in a
  collective): the record rides in the all-reduce of each update's figures (``Trainer.train_step``),
  so agreeing costs nothing, and a signal to any rank stops them all.
- A launcher that spawned local workers passes the signals on to them (:func:`forwarded_to`);
  DataLoader workers ignore them (``nmt.signals.loader_worker_signals``).
- ``--requeue-on-preemption`` under SLURM runs ``scontrol requeue $SLURM_JOB_ID`` once the checkpoint
  is saved; the requeued job runs the same command, which resumes from it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from nmt.checkpoint.manager import LAST
from nmt.signals import PREEMPTION_SIGNALS, signals_handled

STOP_LINE_START = "nmt-train: stopped by "  # how the line of a preempted run begins (scripts look for it)
SCONTROL_TIMEOUT = 60  # seconds scontrol may take before the requeue counts as failed


class StopRequest:
    """Signal handler that records the first preemption signal of the process (later ones are ignored)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum

    def requested(self) -> bool:
        return self.signum is not None

    def name(self) -> str | None:
        return None if self.signum is None else signal.Signals(self.signum).name


@contextlib.contextmanager
def stop_requests() -> Iterator[StopRequest]:
    """Within the block SIGTERM and SIGUSR1 are recorded in the yielded request instead of ending the process;
    once one was, they are ignored after the block too (the process is ending: it saved and says so)."""
    request = StopRequest()
    with signals_handled(PREEMPTION_SIGNALS, request, ignore_after=request.requested):
        yield request


@contextlib.contextmanager
def forwarded_to(pids: Callable[[], Iterable[int]]) -> Iterator[None]:
    """In a launcher: pass SIGTERM/SIGUSR1 on to the worker processes ``pids()``, which save and stop;
    the launcher keeps waiting for them. Once one was passed on, the launcher ignores them until it exits."""
    forwarded: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        forwarded.append(signum)
        for pid in pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    with signals_handled(PREEMPTION_SIGNALS, forward, ignore_after=lambda: bool(forwarded)):
        yield


def requeue_slurm_job() -> str:
    """``scontrol requeue $SLURM_JOB_ID``; returns what happened, as the end of the stop line."""
    job = os.environ.get("SLURM_JOB_ID")
    again = "run the same command again to resume"
    if not job:
        return f"not requeued (--requeue-on-preemption needs SLURM_JOB_ID, which is not set); {again}"
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True,
                              timeout=SCONTROL_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        why = "scontrol not found" if isinstance(e, FileNotFoundError) else str(e).splitlines()[0][:160]
        return f"scontrol requeue {job} failed ({why}); {again}"
    if done.returncode != 0:
        why = ((done.stderr or done.stdout).strip().splitlines() or [f"exit code {done.returncode}"])[0][:160]
        return f"scontrol requeue {job} failed ({why}); {again}"
    return f"requeued SLURM job {job}, which resumes from it when it starts again"


def stop_line(stopped_by: str, num_updates: int, written: list[Path], requeue: bool, hint: str) -> str:
    """The one line a preempted run ends with: what stopped it, what it saved, how it resumes.
    ``written``: the files of the save made at the stop; ``hint`` names the newest checkpoint when there
    are none."""
    head = f"{STOP_LINE_START}{stopped_by} after update {num_updates}"
    if not written:
        return f"{head}; nothing saved at this update (--no-save or --no-last-checkpoints); {hint}"
    last = next((p for p in written if p.name == LAST), None)
    if last is None:  # --no-last-checkpoints with a save due anyway: neither a rerun nor a requeued job finds it
        return f"{head}; saved {written[0]}; run the same command with --restore-file {written[0]} to resume"
    tail = requeue_slurm_job() if requeue else "run the same command again to resume"
    return f"{head}; saved {last}; {tail}"
