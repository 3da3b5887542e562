"""Dynamic batching: sentences of concurrent requests are searched together, and no request waits long for others.

Requests put jobs (their encoded sentences and search options) in one queue. A single worker thread
runs the streaming search of nmt-generate on a *live* source (``SentenceQueue.live_capacity``): the
sentences waiting when it starts, and every sentence queued later with the same options, join the
running rows as soon as there is room, and each job is answered as soon as its own sentences finish.
So a busy server keeps a full batch decoding, and nobody waits for the longest sentence of a batch they
were not in. A full queue refuses new jobs (the server answers 503): memory and latency stay bounded.

Fairness: a search holds at most one batch (``max_sentences`` sentences and ``max_tokens`` source tokens,
running or about to start), and the room its finished sentences leave is handed out one sentence per job in
turn, so a request of hundreds of sentences never sits in front of a one-sentence request: that one starts as
soon as a running sentence ends. It then decodes in the running batch, whose every step costs in proportion to
its rows: so while small requests (at most SMALL_REQUEST sentences) come, each larger one keeps at most
SMALL_REQUEST sentences in the batch, which shrinks to that bound as their sentences end. Alone, or beside other
large ones only, a large request fills the batch. Jobs with other search options need a search of their own:
one that has had a batch's worth stops taking sentences while such a job waits. A job whose client has gone
(its future cancelled) is dropped: its sentences not yet handed out are never searched, those running end with
their batch."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import torch

from nmt.api import TranslationModel
from nmt.config.generate import GenerationConfig
from nmt.cpu_speed import release_freed_memory
from nmt.generation.constraint_input import Terms, forces_terms
from nmt.generation.constraints import SentenceConstraints
from nmt.generation.inference import pad_batch
from nmt.generation.search import Hypothesis, SourceBatch
from nmt.serve.cores import SharedCores

# A server idle this long after searching hands the memory it freed back to the system: the search keeps freed
# blocks for its next steps (nmt.cpu_speed.memory), which would otherwise hold a burst's peak for the server's life.
IDLE_RELEASE_SECONDS = 2.0
# A request of at most this many sentences is small: while one waits or runs, and for SMALL_GRACE_SECONDS after,
# a larger one holds at most this many sentences of the batch (a step of a full batch costs a lone sentence many
# times a step of a small one; the grace keeps the batch small between a client's requests)
SMALL_REQUEST = 16
SMALL_GRACE_SECONDS = 1.0


class QueueFull(Exception):
    """The queue holds as many sentences as it may; the client should retry later."""


@dataclass(eq=False)
class Job:
    """One request's sentences and how to search them; ``future`` gets the list of Translations (cancelling it
    drops the job)."""

    sentences: list[str]
    ids: list[torch.Tensor]
    gen: GenerationConfig
    alignment: bool = False
    attention: bool = False
    terms: Optional[list[Optional[Terms]]] = None  # per sentence, the phrases it must contain (None: none)
    future: Future = field(default_factory=Future)
    found: dict[int, list[Hypothesis]] = field(default_factory=dict)  # sentence index -> hypotheses
    handed: int = 0  # sentences handed to a search so far (the first ``handed``)
    out: int = 0  # of those, the ones the search has not finished

    @property
    def small(self) -> bool:
        return len(self.ids) <= SMALL_REQUEST

    @property
    def key(self) -> tuple[str, bool]:
        """Jobs with the same key can be searched together (attention is computed after the search)."""
        return repr(self.gen), self.alignment

    @property
    def waiting(self) -> int:
        """Sentences not yet handed to a search."""
        return len(self.ids) - self.handed


@dataclass
class BatcherStats:
    streams: int = 0  # searches started (a busy server runs one for a long time)
    sentences: int = 0
    dropped: int = 0  # sentences never searched: their client had gone


class LiveSource:
    """The batches a search pulls from the queue (StopIteration when none is to start now, more on a later
    call): sentences of jobs with the running search's key, while fewer than a bounded batch are out (handed to
    the search and not finished: ``capacity`` sentences, the batcher's ``max_tokens`` source tokens)."""

    def __init__(self, batcher: DynamicBatcher, key: tuple[str, bool], pad: int):
        self.batcher = batcher
        self.key = key
        self.pad = pad
        self.capacity = batcher.max_sentences
        self.rows: dict[int, tuple[Job, int]] = {}  # running sentence id -> (job, index in the job)
        # running sentence id -> its forced phrases: the search reads a sentence's when it starts it
        self.constraints: dict[int, SentenceConstraints] = {}
        self.tokens = 0  # source tokens of ``rows``
        self.small_out = 0  # sentences of small jobs in ``rows``
        self.started = 0  # sentences handed to the search so far (the next id)

    def __iter__(self) -> Iterator[SourceBatch]:
        return self

    def __next__(self) -> SourceBatch:
        self.batcher.adjust_threads()  # the search asks between its steps
        room = self.capacity - len(self.rows)
        taken = self.batcher.take(self.key, room, self.batcher.max_tokens - self.tokens, handed=self.started,
                                  alone=not self.rows, small_running=self.small_out > 0) if room > 0 else []
        if not taken:
            raise StopIteration
        ids, rows = [], []
        for job, k in taken:
            sid = self.started
            self.started += 1
            self.rows[sid] = (job, k)
            terms = job.terms[k] if job.terms else None
            if terms is not None:
                self.constraints[sid] = terms.constraints
            self.tokens += len(job.ids[k])
            self.small_out += job.small
            ids.append(sid)
            rows.append(job.ids[k])
        src_tokens, src_lengths = pad_batch(rows, self.pad)
        return ids, src_tokens, src_lengths

    def finished(self, sid: int) -> tuple[Job, int]:
        """(job, index in the job) of sentence ``sid``, which the search has finished."""
        job, k = self.rows.pop(sid)
        self.constraints.pop(sid, None)
        self.tokens -= len(job.ids[k])
        self.small_out -= job.small
        job.out -= 1
        return job, k


class DynamicBatcher:
    """The worker thread and its queue. ``submit`` is thread-safe; ``close`` lets queued jobs finish."""

    def __init__(self, model: TranslationModel, *, max_tokens: int, max_sentences: int, wait_seconds: float,
                 max_queue: int, cores: Optional[SharedCores] = None):
        self.model = model
        self.cores = cores  # --workers N: the threads this process may borrow from idle ones (nmt.serve.cores)
        self.max_tokens = max_tokens
        self.max_sentences = max_sentences
        self.wait_seconds = wait_seconds
        self.max_queue = max_queue
        self.stats = BatcherStats()
        self._jobs: deque[Job] = deque()  # jobs with sentences not yet handed out: the next to get one first
        self._queued = 0  # sentences not yet handed out
        self._cond = threading.Condition()
        self._closing = False
        self._searched_since_release = False
        self._small_until = 0.0  # until when large jobs keep a small share of the batch (time.monotonic)
        self._thread = threading.Thread(target=self.run, name="nmt-batcher", daemon=True)

    def start(self) -> None:
        """Run the worker in a thread of its own (``run`` runs it in the calling thread instead)."""
        self._thread.start()

    def run(self) -> None:
        """The worker's loop, in the calling thread, until ``close``. nmt-serve runs it in the main thread: torch's
        OpenMP threads work at full speed only for the thread that created them (a 2-thread search from another
        thread took over twice as long as from the main thread)."""
        while (oldest := self._wait_for_work()) is not None:
            self._search(oldest.key, oldest.gen)
            self._searched_since_release = True

    def close(self, timeout: float | None = None) -> None:
        """Finish the queued jobs, then stop the worker."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def submit(self, job: Job) -> Future:
        """Queue ``job``; QueueFull when there is no room (or the server is stopping)."""
        if not job.ids:
            _settle(job.future, [])
            return job.future
        with self._cond:
            if self._closing:
                raise QueueFull("the server is shutting down")
            self._drop_gone()
            if self._queued + len(job.sentences) > self.max_queue:
                raise QueueFull(f"{self._queued} sentences are waiting (at most {self.max_queue})")
            self._jobs.append(job)
            self._queued += len(job.sentences)
            self._cond.notify_all()
        return job.future

    def take(self, key: tuple[str, bool], sentences: int, tokens: int, *, handed: int = 0, alone: bool = True,
             small_running: bool = False) -> list[tuple[Job, int]]:
        """Up to ``sentences`` waiting sentences of ``key``'s jobs and ``tokens`` source tokens (one sentence
        over that when ``alone``: nothing else is out), as (job, index): one per job in turn, from the front of the
        queue; a job that got one goes to the back. While a small job waits or runs (``small_running``), and for
        SMALL_GRACE_SECONDS after, a large one gets none once it has SMALL_REQUEST sentences out. A search that
        has had ``handed`` sentences, a batch's worth or more, gets none while a job with other options waits:
        that job's search comes next."""
        with self._cond:
            self._drop_gone()
            if handed >= self.max_sentences and any(job.key != key for job in self._jobs):
                return []
            turn = deque(job for job in self._jobs if job.key == key)
            now = time.monotonic()
            if small_running or any(job.small for job in turn):
                self._small_until = now + SMALL_GRACE_SECONDS
            shared = now < self._small_until
            served: dict[Job, None] = {}  # the jobs that got a sentence, in the order of their last one
            taken: list[tuple[Job, int]] = []
            while turn and len(taken) < sentences:
                job = turn[0]
                if shared and not job.small and job.out >= SMALL_REQUEST:
                    turn.popleft()  # its share of the batch is out: the others' turn
                    continue
                size = len(job.ids[job.handed])
                if size > tokens and (taken or not alone):
                    break
                turn.popleft()
                taken.append((job, job.handed))
                job.handed += 1
                job.out += 1
                tokens -= size
                served.pop(job, None)
                served[job] = None
                if job.waiting:
                    turn.append(job)
            self._queued -= len(taken)
            self._jobs = deque([job for job in self._jobs if job not in served]
                               + [job for job in served if job.waiting])
            return taken

    def _drop_gone(self) -> None:
        """Forget the queued jobs nobody waits for any more (their client went: the future was cancelled).
        Called holding the lock."""
        gone = [job for job in self._jobs if job.future.done()]
        if gone:
            self._jobs = deque(job for job in self._jobs if not job.future.done())
            dropped = sum(job.waiting for job in gone)
            self._queued -= dropped
            self.stats.dropped += dropped

    def _wait_for_work(self) -> Job | None:
        """The oldest job once there is one, after a short wait for others to arrive (None: closing with
        nothing queued). Idle for IDLE_RELEASE_SECONDS after a search, it hands freed memory back first."""
        while True:
            with self._cond:
                self._drop_gone()
                release = False
                while not self._jobs and not release:
                    if self._closing:
                        return None
                    if not self._searched_since_release:
                        self._cond.wait()
                    elif not self._cond.wait(IDLE_RELEASE_SECONDS):
                        release = True
                    self._drop_gone()
                if not release:
                    deadline = time.monotonic() + self.wait_seconds
                    while self._queued < self.max_sentences and not self._closing:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                    self._drop_gone()
                    if self._jobs:
                        return self._jobs[0]
                    continue
            self._searched_since_release = False
            release_freed_memory()  # outside the lock: a request that comes meanwhile is queued at once

    def _search(self, key: tuple[str, bool], gen: GenerationConfig) -> None:
        """One streaming search over the live source of ``key``'s jobs, answering each job when it is done."""
        source = LiveSource(self, key, self.model.data.src_dict.pad())
        self.stats.streams += 1
        try:
            with self.model.lock, (self.cores.searching() if self.cores else contextlib.nullcontext()):
                for sid, hyps in self.model.translator(gen).translate_stream(
                        source, need_attn=key[1], constraints=source.constraints if forces_terms(gen) else None):
                    self.adjust_threads()
                    job, k = source.finished(sid)
                    if job.future.done():  # its client has gone
                        continue
                    job.found[k] = hyps
                    if len(job.found) == len(job.ids):
                        self._answer(job)
        except BaseException as e:  # noqa: BLE001 - the jobs hear of the failure; the worker goes on
            self._fail(key, {job: None for job, _ in source.rows.values()}, e)

    def _fail(self, key: tuple[str, bool], running: dict[Job, None], error: BaseException) -> None:
        """Fail the jobs of a search that raised ``error``: those it was running, with their sentences still
        queued; if it failed before taking any (building it), every queued job of ``key``, which would otherwise
        start it again, forever."""
        with self._cond:
            failed = list(running) or [job for job in self._jobs if job.key == key]
            if failed:
                self._jobs = deque(job for job in self._jobs if job not in failed)
                self._queued -= sum(job.waiting for job in failed)
        for job in failed:
            _settle(job.future, error=error)

    def adjust_threads(self) -> None:
        """Between decoding steps: with --workers N, take this process's share of the idle workers' cores."""
        if self.cores is not None:
            self.cores.adjust()

    def _answer(self, job: Job) -> None:
        try:
            found = [self.model.translation(job.sentences[k], job.ids[k], job.found[k], alignment=job.alignment,
                                            attention=job.attention, terms=job.terms[k] if job.terms else None)
                     for k in range(len(job.ids))]
        except BaseException as e:  # noqa: BLE001 - this job fails; the others go on
            _settle(job.future, error=e)
            return
        self.stats.sentences += len(found)
        _settle(job.future, found)

    def describe(self) -> dict[str, Any]:
        """Figures for /health."""
        return {"queued_sentences": self._queued, "searches": self.stats.streams,
                "sentences": self.stats.sentences, "dropped_sentences": self.stats.dropped}


def _settle(future: Future, result: Any = None, error: BaseException | None = None) -> None:
    """Give ``future`` its result (or ``error``) unless it was cancelled meanwhile (the client went)."""
    with contextlib.suppress(InvalidStateError):
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
