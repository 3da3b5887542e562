"""Private work folders beside an output folder, and what happens to them when a run is stopped.

A work folder is named ``.NAME.tmp-XXXX`` (the output being built) or ``.NAME.old-XXXX`` (the
output being replaced) and holds an owner file naming the process that made it. SIGTERM is turned
into the same interruption as Ctrl-C, so the ``except``/``finally`` blocks that remove the folder
run. A run killed outright (SIGKILL, power loss) leaves its folder behind: the next run removes
it, but only a folder with a valid owner file whose process is gone (never a folder it cannot
prove it made, nor one of a run still going on).

The signal helpers here are shared with nmt-train's preemption (``nmt.training.preemption``):
``signals_handled`` installs and restores handlers, ``loader_worker_signals`` keeps a DataLoader
worker out of the training process's SIGTERM/SIGUSR1.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from nmt.fileio import atomic_write_text

OWNER_FILE = ".nmt-owner.json"
KINDS = ("tmp", "old")
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # a scheduler's "save and stop" (SLURM: --signal=USR1@T)


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (Linux), to tell a reused pid from the original."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]  # field 22, counted after the "(comm)" field


def _owner() -> dict[str, Any]:
    pid = os.getpid()
    return {"program": "nmt", "pid": pid, "start": process_start_time(pid), "host": socket.gethostname()}


def new_work_dir(beside: Path, kind: str) -> Path:
    """A private folder ``.NAME.KIND-XXXX`` in ``beside``'s folder (same file system: renames are
    atomic), holding the owner file."""
    folder = Path(tempfile.mkdtemp(prefix=f".{beside.name}.{kind}-", dir=beside.parent))
    atomic_write_text(folder / OWNER_FILE, json.dumps(_owner()) + "\n")
    return folder


def release(folder: Path) -> None:
    """Remove the owner file: ``folder`` is about to become the output itself."""
    with contextlib.suppress(FileNotFoundError):
        (folder / OWNER_FILE).unlink()


def _owner_gone(folder: Path) -> int | None:
    """The pid that made ``folder`` when the owner file is ours and that process no longer runs;
    None when the folder is not provably ours or its process may still be running."""
    marker = folder / OWNER_FILE
    try:
        if marker.is_symlink() or marker.stat().st_size > 4096:
            return None
        owner = json.loads(marker.read_text(encoding="utf-8"))
        pid = owner["pid"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if owner.get("program") != "nmt" or not isinstance(pid, int) or owner.get("host") != socket.gethostname():
        return None  # a run on another machine sharing this folder cannot be checked from here
    if pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return pid
    except PermissionError:
        return None  # alive, another user's
    started = process_start_time(pid)
    return pid if owner.get("start") and started and started != owner["start"] else None  # pid reused


def clean_leftovers(beside: Path) -> list[tuple[Path, int]]:
    """Remove the work folders of ``beside`` left by runs that were killed; returns (folder, pid) of each."""
    removed = []
    for kind in KINDS:
        for folder in beside.parent.glob(f".{beside.name}.{kind}-*"):
            if folder.is_symlink() or not folder.is_dir():
                continue
            pid = _owner_gone(folder)
            if pid is not None:
                shutil.rmtree(folder, ignore_errors=True)
                if not folder.exists():
                    removed.append((folder, pid))
    return removed


class _Stop:
    """SIGTERM handler: raise KeyboardInterrupt once, as Ctrl-C does; ignore repeats, so that a
    second signal does not cut the clean-up short."""

    def __init__(self) -> None:
        self.fired = False

    def __call__(self, signum: int, frame: Any) -> None:
        if not self.fired:
            self.fired = True
            raise KeyboardInterrupt


def _never() -> bool:
    return False


@contextlib.contextmanager
def signals_handled(signals: Iterable[int], handler: Callable[[int, Any], Any],
                    ignore_after: Callable[[], bool] = _never) -> Iterator[bool]:
    """Within the block ``handler`` receives ``signals``; the previous handlers come back after it, unless
    ``ignore_after()`` is then true: the process is on its way out (it was asked to stop) and the signals
    stay ignored until it exits, so a repeat cannot kill it with the default action in its last moments.
    SIG_IGN, not a Python handler: Python puts the default back for those while it shuts down.
    Yields False and changes nothing outside the main thread, where Python cannot set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield True
    finally:
        ignore = ignore_after()
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_IGN if ignore else signal.SIG_DFL if old is None else old)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM interrupts the run like Ctrl-C (no-op outside the main thread)."""
    with signals_handled((signal.SIGTERM,), _Stop()):
        yield


@contextlib.contextmanager
def stop_signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends (a few renames that must not be cut in half); one
    that arrived meanwhile then interrupts the run."""
    arrived: list[int] = []
    with signals_handled(_STOP_SIGNALS, lambda signum, frame: arrived.append(signum)):
        yield
    if arrived:
        raise KeyboardInterrupt


@contextlib.contextmanager
def workers_starting() -> Iterator[None]:
    """Around starting pool workers (their initializer calls :func:`worker_signals`): SIGINT/SIGTERM are held
    (blocked) meanwhile. A forked worker runs this process's handlers until its initializer sets its own, and
    a pool ended right after it started (an input refused at once) made a worker not yet initialized print a
    KeyboardInterrupt traceback. Held, the signal reaches the worker once it is ready for it, and this process
    once the workers are started."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def worker_signals() -> None:
    """In a pool worker: the parent handles interruptions and terminates the pool (with SIGTERM,
    which must kill the worker, not raise inside it). Then the signals held since the start
    (:func:`workers_starting`) may come."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


def loader_worker_signals(worker_id: int = 0) -> None:
    """A DataLoader worker's ``worker_init_fn``: a preemption signal sent to every process of the job is
    the training process's to handle (it finishes its update, saves, and then shuts its workers down
    itself). torch's own SIGTERM handler would end the worker and fail the run's next batch."""
    for sig in PREEMPTION_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
