"""nmt-generate --workers N: N processes translate a split together, each with its own copy of the models, 1/N of
the sentences and 1/N of the cores.

On a CPU much of a decoding step is Python and small operations that a second thread barely speeds up; N
single-thread processes run N steps at once instead (as nmt-serve --workers does, and CTranslate2's
``inter_threads``). The sentences are dealt out in length order, every N-th sentence of the sorted split to the
same process, so every process gets the same mix of short and long sources and they finish at about the same
time. Each one packs its share into batches by --batch-size / --max-tokens and runs the usual streaming search.
They all load first and then start searching at once, so the speed printed is the search's alone, from the
start to the last sentence, as it is for one process.

Workers are spawned (fork would copy torch's thread pools, which hangs) and send their hypotheses back (as numpy
arrays) in chunks as they finish; the parent prints them once all are done."""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Iterator, Optional, cast

import numpy as np
import torch

from nmt.config.generate import GenerateJob
from nmt.errors import WorkerError, exit_reporting
from nmt.generation.search import Hypothesis

CHUNK = 16  # sentences a worker sends back at once


def deal(ordered: np.ndarray, workers: int) -> list[np.ndarray]:
    """``ordered`` (sorted by length) dealt out like cards, one to each worker in turn, the direction reversed at
    every round (0, 1, 1, 0, 0, 1, ...) so that no worker always gets the longer of two neighbours: equal shares
    of every length. Each share keeps the length order."""
    position = np.arange(len(ordered)) % (2 * workers)
    owner = np.where(position < workers, position, 2 * workers - 1 - position)
    return [ordered[owner == k] for k in range(workers)]


Sent = tuple[np.ndarray, float, np.ndarray, Optional[np.ndarray]]  # a Hypothesis's fields, as numpy arrays


def _to_numpy(hyps: list[Hypothesis]) -> list[Sent]:
    """Hypotheses as they travel between processes: numpy arrays go by value (torch's tensors would each take a
    shared-memory segment)."""
    return [(h.tokens.numpy(), h.score, h.positional_scores.numpy(),
             h.attention.numpy() if h.attention is not None else None) for h in hyps]


def _from_numpy(sent: list[Sent]) -> list[Hypothesis]:
    return [Hypothesis(torch.from_numpy(tokens), score, torch.from_numpy(positional),
                       torch.from_numpy(attention) if attention is not None else None)
            for tokens, score, positional, attention in sent]


def worker_main(cfg: GenerateJob, need_attn: bool, conn: Connection) -> None:
    """A worker process: load the models and data, say ("ready", the models' longest source), receive its
    share (dataset indices in length order), then send ("results", [(id, hypotheses)...]) as sentences finish
    and ("done", sentences, tokens, seconds); on failure ("error", exit code, reason)."""
    try:
        from nmt.data.batching import split_sorted
        from nmt.data.data_bin import open_data_dir
        from nmt.data.language_pair_dataset import load_language_pair
        from nmt.generation.inference import batch_sentences, source_batches, split_location
        from nmt.generation.loading import make_translator
        from nmt.plugin_loader import load_plugins

        load_plugins(cfg.common.user_dir)
        torch.manual_seed(cfg.common.seed)
        data = open_data_dir(cfg.data, cfg.source_lang, cfg.target_lang)
        dataset = load_language_pair(str(data.path), cfg.gen_subset, data.src, data.tgt)
        translator = make_translator(cfg.generation, cfg.inference, data, cfg.common.seed)
        conn.send(("ready", translator.max_source_positions()))
        share = conn.recv()
        batches = split_sorted(share, np.asarray(dataset.src_sizes)[share], cfg.inference.max_tokens,
                               batch_sentences(cfg.inference))
        chunk: list[tuple[int, list[Sent]]] = []
        for sid, hyps in translator.translate_stream(source_batches(dataset, batches), need_attn=need_attn,
                                                     where=split_location(str(data.path), cfg.gen_subset)):
            chunk.append((sid, _to_numpy(hyps)))
            if len(chunk) == CHUNK:
                conn.send(("results", chunk))
                chunk = []
        conn.send(("results", chunk))
        conn.send(("done", translator.sentences, translator.tokens, translator.seconds))
    except BaseException as e:  # noqa: BLE001 - the parent reports it as one line
        exit_reporting(conn, e, "a generate worker")


class GenerateWorkers:
    """``workers`` processes, started at once so that they load while this one reads the data (it never loads
    the models itself); ``translate`` shares a split out among them. A context manager: leaving it stops any
    still running. After ``translate``, ``sentences``, ``tokens`` and ``seconds`` (from the common start to the
    last sentence) hold the search's figures."""

    def __init__(self, cfg: GenerateJob, workers: int, need_attn: bool):
        context = multiprocessing.get_context("spawn")
        self.started: list[tuple[BaseProcess, Connection]] = []
        self.sentences = self.tokens = 0
        self.seconds = 0.0
        self._max_source_positions: int | None = None
        for _ in range(workers):
            ours, theirs = context.Pipe()
            process = context.Process(target=worker_main, args=(cfg, need_attn, theirs), name="nmt-generate-worker")
            process.start()
            theirs.close()  # the worker holds the other end: its exit ends the pipe
            self.started.append((process, ours))

    def __enter__(self) -> "GenerateWorkers":
        return self

    def __exit__(self, *exc: object) -> None:
        for process, conn in self.started:
            if process.is_alive():
                process.kill()
            process.join()
            conn.close()

    def max_source_positions(self) -> int:
        """The longest source the models were built for, once every worker has loaded them."""
        if self._max_source_positions is None:
            said = [self._receive(conn, process) for process, conn in self.started]
            if any(message[0] != "ready" for message in said):
                raise WorkerError("a generate worker spoke before it was ready")
            self._max_source_positions = min(int(message[1]) for message in said)
        return self._max_source_positions

    def translate(self, ordered: np.ndarray) -> Iterator[tuple[int, list[Hypothesis]]]:
        """(sentence id, hypotheses) of every sentence of ``ordered`` (dataset indices in length order)."""
        self.max_source_positions()  # every worker ready
        start = time.perf_counter()
        for (_, conn), share in zip(self.started, deal(ordered, len(self.started))):
            conn.send(share)
        # Held until every worker is done: turning hypotheses into lines here, meanwhile, would take the
        # workers' cores (one process keeps that work out of its search time too).
        found: list[tuple[int, list[Hypothesis]]] = []
        running = {conn: process for process, conn in self.started}
        while running:
            for ready in wait(list(running)):
                conn = cast(Connection, ready)  # wait() returns the connections it was given
                message = self._receive(conn, running[conn])
                if message[0] == "results":
                    found += [(sid, _from_numpy(sent)) for sid, sent in message[1]]
                elif message[0] == "done":
                    self.sentences += message[1]
                    self.tokens += message[2]
                    del running[conn]
        self.seconds = time.perf_counter() - start
        yield from found

    @staticmethod
    def _receive(conn: Connection, process: BaseProcess) -> tuple:
        """The worker's next message; its failure as WorkerError."""
        try:
            message = conn.recv()
        except (EOFError, OSError):
            process.join()
            raise WorkerError(f"a generate worker exited with code {process.exitcode} without finishing; see the "
                              "lines above") from None
        if message[0] == "error":
            raise WorkerError(message[2], message[1])
        return message
