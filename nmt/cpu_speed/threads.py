"""One thread for the steps of a few rows (a lone sentence: what a server mostly sees), the process's threads for
the others.

A decoding step on a few rows is a hundred-odd operations too small to split: with a second thread each pays the
hand-over between threads and the cores' cache misses, so a lone sentence decodes slower with two threads than
with one, and much slower when another process keeps the second core busy. A batch of hundreds of rows is the
other way round. Inside :func:`searching` (around a search), :func:`fit_threads` (called by the ensemble before
each encoder pass and decoder step) runs the work of at most ``SMALL_ROWS`` rows, and the search's own operations
after it, on one thread, and larger work on the threads the process was given (--threads, torch's default, or
nmt-serve's share of the cores, which may change between steps); the count is restored when the search ends.
Nobody sets a thread count for lone sentences. Setting it costs well under a microsecond.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import torch

SMALL_ROWS = 16  # work on at most this many rows (decoder rows: sentences x beams; encoder: source tokens): one thread


class _Threads:
    """The search running in this process: the threads it may use (``ceiling``) and the count last set here."""

    ceiling: Optional[int] = None
    last: int = 0


_state = _Threads()


@contextlib.contextmanager
def searching() -> Iterator[None]:
    """Around a search (nested: the outer one rules): ``fit_threads`` applies inside; the process's thread count is
    as before afterwards."""
    if _state.ceiling is not None:
        yield
        return
    _state.ceiling = _state.last = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != _state.ceiling and torch.get_num_threads() == _state.last:
            torch.set_num_threads(_state.ceiling)
        _state.ceiling = None


def fit_threads(rows: int) -> None:
    """Inside ``searching``: one thread for work on at most SMALL_ROWS rows, else the search's threads. A count set
    by someone else since (nmt-serve giving this worker another share of the cores) becomes the search's."""
    if _state.ceiling is None:
        return
    now = torch.get_num_threads()
    if now != _state.last:
        _state.ceiling = now
    want = 1 if rows <= SMALL_ROWS else _state.ceiling
    if want != now:
        torch.set_num_threads(want)
    _state.last = want
