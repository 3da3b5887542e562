"""Stop and preemption signals, shared by every command that must clean up or save when it is stopped.

SIGTERM is turned into the same interruption as Ctrl-C (``sigterm_as_interrupt``), so the
``except``/``finally`` blocks that remove a half-built output run; a few renames hold the signals
until they are done (``stop_signals_deferred``); pool and DataLoader workers leave the signals to
their parent (``worker_signals``, ``loader_worker_signals``); nmt-train's preemption
(``nmt.training.preemption``) installs its handlers with ``signals_handled``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Callable, Iterable, Iterator

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # a scheduler's "save and stop" (SLURM: --signal=USR1@T)


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
