"""Dynamic batching: sentences of concurrent requests are searched together.

Requests put jobs (their encoded sentences and search options) in one queue. A single worker thread
runs the streaming search of nmt-generate on a *live* source (``SentenceQueue.live_capacity``): the
sentences waiting when it starts, and every sentence queued later with the same options, join the
running rows as soon as there is room, and each job is answered as soon as its own sentences finish.
So a busy server keeps a full batch decoding, and nobody waits for the longest sentence of a batch they
were not in. A full queue refuses new jobs (the server answers 503): memory and latency stay bounded."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import torch

from nmt.api import TranslationModel
from nmt.config.generate import GenerationConfig
from nmt.generation.inference import pad_batch
from nmt.generation.search import Hypothesis, SourceBatch
from nmt.serve.cores import SharedCores


class QueueFull(Exception):
    """The queue holds as many sentences as it may; the client should retry later."""


@dataclass
class Job:
    """One request's sentences and how to search them; ``future`` gets the list of Translations."""

    sentences: list[str]
    ids: list[torch.Tensor]
    gen: GenerationConfig
    alignment: bool = False
    attention: bool = False
    future: Future = field(default_factory=Future)
    found: dict[int, list[Hypothesis]] = field(default_factory=dict)  # sentence index -> hypotheses

    @property
    def key(self) -> tuple[str, bool]:
        """Jobs with the same key can be searched together (attention is computed after the search)."""
        return repr(self.gen), self.alignment


@dataclass
class BatcherStats:
    streams: int = 0  # searches started (a busy server runs one for a long time)
    sentences: int = 0


class LiveSource:
    """The batches a search pulls from the queue: jobs with the running search's key, in order, as they
    come (StopIteration when none waits now, more on a later call). It stops offering jobs once the oldest
    waiting job has another key, so the search ends and that job gets its turn."""

    def __init__(self, batcher: DynamicBatcher, key: tuple[str, bool], pad: int):
        self.batcher = batcher
        self.key = key
        self.pad = pad
        self.capacity = batcher.max_sentences
        self.rows: dict[int, tuple[Job, int]] = {}  # running sentence id -> (job, index in the job)
        self.started = 0  # sentences handed to the search so far (the next id)

    def __iter__(self) -> Iterator[SourceBatch]:
        return self

    def __next__(self) -> SourceBatch:
        self.batcher.adjust_threads()  # the search asks between its steps
        jobs = self.batcher.take_matching(self.key)
        if not jobs:
            raise StopIteration
        ids, rows = [], []
        for job in jobs:
            for k, row in enumerate(job.ids):
                sid = self.started
                self.started += 1
                self.rows[sid] = (job, k)
                ids.append(sid)
                rows.append(row)
        src_tokens, src_lengths = pad_batch(rows, self.pad)
        return ids, src_tokens, src_lengths


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
        self._jobs: deque[Job] = deque()
        self._queued = 0  # sentences in self._jobs
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self.run, name="nmt-batcher", daemon=True)

    def start(self) -> None:
        """Run the worker in a thread of its own (``run`` runs it in the calling thread instead)."""
        self._thread.start()

    def run(self) -> None:
        """The worker's loop, in the calling thread, until ``close``. nmt-serve runs it in the main thread: torch's
        OpenMP threads work at full speed only for the thread that created them (a 2-thread search from another
        thread took 107 ms where the main thread took 45 on this machine)."""
        while (oldest := self._wait_for_work()) is not None:
            self._search(oldest.key, oldest.gen)

    def close(self, timeout: float | None = None) -> None:
        """Finish the queued jobs, then stop the worker."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def submit(self, job: Job) -> Future:
        """Queue ``job``; QueueFull when there is no room (or the server is stopping)."""
        with self._cond:
            if self._closing:
                raise QueueFull("the server is shutting down")
            if self._queued + len(job.sentences) > self.max_queue:
                raise QueueFull(f"{self._queued} sentences are waiting (at most {self.max_queue})")
            self._jobs.append(job)
            self._queued += len(job.sentences)
            self._cond.notify_all()
        return job.future

    def take_matching(self, key: tuple[str, bool]) -> list[Job]:
        """Waiting jobs with ``key`` from the front of the queue, up to a batch's tokens (at least one job)."""
        with self._cond:
            taken: list[Job] = []
            tokens = 0
            while self._jobs and self._jobs[0].key == key:
                job = self._jobs[0]
                size = sum(len(i) for i in job.ids)
                if taken and tokens + size > self.max_tokens:
                    break
                taken.append(self._jobs.popleft())
                self._queued -= len(job.sentences)
                tokens += size
            return taken

    def _wait_for_work(self) -> Job | None:
        """The oldest job once there is one, after a short wait for others to arrive (None: closing with
        nothing queued)."""
        with self._cond:
            while not self._jobs:
                if self._closing:
                    return None
                self._cond.wait()
            deadline = time.monotonic() + self.wait_seconds
            while self._queued < self.max_sentences and not self._closing:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._jobs[0]

    def _search(self, key: tuple[str, bool], gen: GenerationConfig) -> None:
        """One streaming search over the live source of ``key``'s jobs, answering each job when it is done."""
        source = LiveSource(self, key, self.model.data.src_dict.pad())
        self.stats.streams += 1
        try:
            with self.model.lock, (self.cores.searching() if self.cores else contextlib.nullcontext()):
                for sid, hyps in self.model.translator(gen).translate_stream(source, need_attn=key[1]):
                    self.adjust_threads()
                    job, k = source.rows.pop(sid)
                    job.found[k] = hyps
                    if len(job.found) == len(job.ids):
                        self._answer(job)
        except BaseException as e:  # noqa: BLE001 - the jobs hear of the failure; the worker goes on
            running = [job for job, _ in source.rows.values()]
            # a failure before the search took anything (building it) fails the jobs it was started for,
            # which would otherwise start it again, forever
            for job in running or self.take_matching(key):
                if not job.future.done():
                    job.future.set_exception(e)

    def adjust_threads(self) -> None:
        """Between decoding steps: with --workers N, take this process's share of the idle workers' cores."""
        if self.cores is not None:
            self.cores.adjust()

    def _answer(self, job: Job) -> None:
        try:
            found = [self.model.translation(job.sentences[k], job.ids[k], job.found[k], alignment=job.alignment,
                                            attention=job.attention) for k in range(len(job.ids))]
        except BaseException as e:  # noqa: BLE001 - this job fails; the others go on
            job.future.set_exception(e)
            return
        self.stats.sentences += len(found)
        job.future.set_result(found)

    def describe(self) -> dict[str, Any]:
        """Figures for /health."""
        return {"queued_sentences": self._queued, "searches": self.stats.streams,
                "sentences": self.stats.sentences}
