"""nmt-serve --workers N: a worker that searches while the others are idle borrows their cores.

Each worker gets its share of the cores (``--threads``, one each with two workers on two cores) so that under
load the workers' searches run side by side without fighting over them. A lone request would then run on one
core while the others idle, markedly slower than on two (benchmarks/RESULTS.md, serve_load). So the workers
mark, in memory they share, which of them are searching, and a searching worker runs on its share of all the
workers' threads: all of them when it searches alone, its own when every worker searches. Each worker writes
only its own flag, and the parent clears a replaced worker's (one killed mid-search cannot). A worker checks
between decoding steps (the search asks its live source for sentences then, and hands over finished ones), so
one that starts searching waits a step or two at most for the lender to
give its threads back. A search never runs more threads than the workers' --threads in all, nor than the cores,
so lending adds none to what a fully loaded server runs. Not with --compile: inductor writes the thread count
into the kernels it compiles."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch

from nmt.hardware import usable_cores


def searching_flags(context: Any, workers: int) -> Any:
    """The flags the workers share, one per worker (1 while it searches), made by the parent before it starts
    them; ``context`` is the multiprocessing context they are started with."""
    return context.Array("b", workers, lock=False)


class SharedCores:
    """The threads of the workers, ``threads`` each, shared out among those that are searching.

    ``flags`` is :func:`searching_flags`' array (this worker's is ``slot``): each worker writes only its own
    entry, so no lock is needed, and reads all of them."""

    def __init__(self, flags: Any, slot: int, threads: int):
        self.flags = flags
        self.slot = slot
        self.own = max(1, threads)
        self.total = max(self.own, min(self.own * len(flags), usable_cores()))  # never more threads than cores

    @contextmanager
    def searching(self) -> Iterator[None]:
        """Mark this worker as searching while the block runs, on its share of the threads; its own after."""
        self.flags[self.slot] = 1
        try:
            self.adjust()
            yield
        finally:
            self.flags[self.slot] = 0
            self.set_threads(self.own)  # idle: only its own share, in case it wakes while others search

    def share(self) -> int:
        """The threads this searching worker may use now: the total split among the searching workers."""
        return max(self.own, self.total // max(1, sum(self.flags)))  # a step late at worst

    def adjust(self) -> None:
        """Between decoding steps: run on this worker's current share of the threads."""
        self.set_threads(self.share())

    def set_threads(self, n: int) -> None:
        if n != torch.get_num_threads():  # asked of torch each time: loading the model sets its threads too
            torch.set_num_threads(n)
