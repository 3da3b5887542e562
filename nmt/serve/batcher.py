"""Dynamic batching: sentences of concurrent requests are searched together.

Requests put jobs (their encoded sentences and search options) in one queue; a single worker thread
takes the oldest job, waits a few milliseconds for more with the same options (up to a batch's tokens
and sentences), searches them in one call of the streaming search, and hands each job its results.
While a batch runs, new jobs wait for the next one; a full queue refuses new jobs (the server answers
503), so memory and latency stay bounded under any load."""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from nmt.api import Translation, TranslationModel
from nmt.config.generate import GenerationConfig


class QueueFull(Exception):
    """The queue holds as many sentences as it may; the client should retry later."""


@dataclass
class Job:
    """One request's sentences and how to search them."""

    sentences: list[str]
    ids: list[torch.Tensor]
    gen: GenerationConfig
    alignment: bool = False
    attention: bool = False
    future: Future = field(default_factory=Future)

    @property
    def key(self) -> tuple[str, bool, bool]:
        """Jobs with the same key can share a batch."""
        return repr(self.gen), self.alignment, self.attention

    @property
    def tokens(self) -> int:
        return sum(len(i) for i in self.ids)


@dataclass
class BatcherStats:
    batches: int = 0
    sentences: int = 0
    seconds: float = 0.0  # time spent searching


class DynamicBatcher:
    """The worker thread and its queue. ``submit`` is thread-safe; ``close`` lets queued jobs finish."""

    def __init__(self, model: TranslationModel, *, max_tokens: int, max_sentences: int, wait_seconds: float,
                 max_queue: int):
        self.model = model
        self.max_tokens = max_tokens
        self.max_sentences = max_sentences
        self.wait_seconds = wait_seconds
        self.max_queue = max_queue
        self.stats = BatcherStats()
        self._jobs: deque[Job] = deque()
        self._queued = 0  # sentences in self._jobs
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="nmt-batcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float | None = None) -> None:
        """Finish the queued jobs, then stop the worker."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)

    @property
    def queued(self) -> int:
        return self._queued

    def submit(self, job: Job) -> Future:
        """Queue ``job``; its future gets the list of Translations (or the error). QueueFull when there is no room."""
        with self._cond:
            if self._closing:
                raise QueueFull("the server is shutting down")
            if self._queued + len(job.sentences) > self.max_queue:
                raise QueueFull(f"{self._queued} sentences are waiting (at most {self.max_queue})")
            self._jobs.append(job)
            self._queued += len(job.sentences)
            self._cond.notify_all()
        return job.future

    def _fits(self, jobs: list[Job], job: Job) -> bool:
        sentences = sum(len(j.sentences) for j in jobs) + len(job.sentences)
        tokens = sum(j.tokens for j in jobs) + job.tokens
        return sentences <= self.max_sentences and tokens <= self.max_tokens

    def _take(self) -> list[Job]:
        """The next batch: the oldest job plus later ones with its options, after waiting up to
        ``wait_seconds`` for the batch to fill. Called with the lock held; [] when closing and empty."""
        while not self._jobs:
            if self._closing:
                return []
            self._cond.wait()
        deadline = time.monotonic() + self.wait_seconds
        while not self._closing:
            left = deadline - time.monotonic()
            chosen = self._matching()
            full = sum(len(j.sentences) for j in chosen) >= self.max_sentences or \
                sum(j.tokens for j in chosen) >= self.max_tokens
            if left <= 0 or full:
                break
            self._cond.wait(left)
        chosen = self._matching()
        for job in chosen:
            self._jobs.remove(job)
            self._queued -= len(job.sentences)
        return chosen

    def _matching(self) -> list[Job]:
        """Queued jobs that can join the oldest one's batch, oldest first (the oldest always)."""
        first = self._jobs[0]
        chosen = [first]
        for job in list(self._jobs)[1:]:
            if job.key == first.key and self._fits(chosen, job):
                chosen.append(job)
        return chosen

    def _run(self) -> None:
        while True:
            with self._cond:
                jobs = self._take()
            if not jobs:
                return
            self._search(jobs)

    def _search(self, jobs: list[Job]) -> None:
        first = jobs[0]
        sentences = [s for j in jobs for s in j.sentences]
        ids = [i for j in jobs for i in j.ids]
        start = time.perf_counter()
        try:
            found: list[Translation] = self.model.translate_ids(
                sentences, ids, first.gen, alignment=first.alignment, attention=first.attention,
                max_tokens=self.max_tokens, batch_size=self.max_sentences)
        except BaseException as e:  # noqa: BLE001 - every job hears of the failure; the worker goes on
            for job in jobs:
                job.future.set_exception(e)
            return
        finally:
            self.stats.seconds += time.perf_counter() - start
        self.stats.batches += 1
        self.stats.sentences += len(sentences)
        at = 0
        for job in jobs:
            job.future.set_result(found[at: at + len(job.sentences)])
            at += len(job.sentences)

    def describe(self) -> dict[str, Any]:
        """Figures for /health."""
        s = self.stats
        return {"queued_sentences": self._queued, "batches": s.batches, "sentences": s.sentences,
                "mean_batch_sentences": round(s.sentences / s.batches, 2) if s.batches else 0.0}
