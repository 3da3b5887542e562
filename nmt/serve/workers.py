"""nmt-serve --workers N: N server processes sharing one port, each with its own copy of the model and its own
dynamic batching.

A server's search steps cover only the few sentences its clients have in flight; on a CPU such a step is
mostly Python and small products that a second thread barely speeds up. Two single-thread processes run two
such steps at once instead (CTranslate2's ``inter_threads`` does the same with threads of C++). How they share
the port, so that the kernel spreads the connections evenly, is nmt.serve.sockets'.

The parent only supervises: it waits until every worker has loaded the model (the first failure ends the
server with that worker's one-line reason), announces the server once, starts a worker again if one dies,
and on SIGTERM/SIGINT passes SIGTERM on and waits while each drains its in-flight requests."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Callable

from nmt.config.serve import ServeJob
from nmt.errors import WorkerError, exit_reporting
from nmt.serve.cores import searching_flags
from nmt.serve.sockets import WorkerPort

POLL_SECONDS = 1.0


def worker_main(cfg: ServeJob, port: WorkerPort, conn: Connection, flags: Any, slot: int) -> None:
    """Worker ``slot``'s process (spawned, so it imports the user's plugins itself): serve ``port`` until SIGTERM,
    lending its cores to the others while idle (``flags``: nmt.serve.cores). It tells the parent ("ready", source
    language, target language), ("error", exit code, reason) or ("stopped", sentences translated)."""
    from nmt.plugin_loader import load_plugins
    from nmt.serve.cores import SharedCores
    from nmt.serve.process import serve

    threading.Thread(target=_stop_when_orphaned, args=(os.getppid(),), name="nmt-orphan-watch", daemon=True).start()
    try:
        load_plugins(cfg.common.user_dir)
        # compiled kernels keep the thread count they were compiled with, so a --compile worker keeps its own
        cores = None if cfg.inference.compile else SharedCores(flags, slot, cfg.inference.threads or 1)
        served = serve(cfg, port.listen, lambda model: conn.send(("ready", model.source_lang, model.target_lang)),
                       cores)
    except BaseException as e:  # noqa: BLE001 - the parent reports it as one line
        exit_reporting(conn, e, "a server process")
    with contextlib.suppress(OSError):
        conn.send(("stopped", served))


def _stop_when_orphaned(parent: int) -> None:
    """SIGTERM to this worker once its parent is gone (killed without a chance to stop it), so it drains and
    exits rather than serving on unsupervised."""
    while os.getppid() == parent:
        time.sleep(POLL_SECONDS)
    os.kill(os.getpid(), signal.SIGTERM)


@dataclass
class Worker:
    process: BaseProcess
    conn: Connection
    ready: bool = False
    ended: bool = False

    def messages(self) -> list[tuple[Any, ...]]:
        """What the worker has sent and the parent not yet read."""
        found = []
        with contextlib.suppress(EOFError, OSError):
            while self.conn.poll():
                found.append(self.conn.recv())
        return found


class WorkerPool:
    """``cfg.workers`` processes serving ``port``; ``run`` supervises them until they have all stopped."""

    def __init__(self, cfg: ServeJob, port: WorkerPort, on_ready: Callable[[str, str], None],
                 say: Callable[[str], None]):
        self.cfg = cfg
        self.port = port
        self.on_ready = on_ready  # (source language, target language), once every worker is ready
        self.say = say  # a line for the operator (a worker died and another starts)
        self.context = multiprocessing.get_context("spawn")  # fork would copy torch's thread pools, which hangs
        self.searching = searching_flags(self.context, cfg.workers)  # which workers search now (nmt.serve.cores)
        self.workers: list[Worker] = []
        self.stopping = False
        self.announced = False
        self.failure: WorkerError | None = None
        self.served = 0  # sentences translated by the workers that stopped normally
        self.lost = 0  # workers that died while serving (their sentences are not in ``served``)

    def run(self) -> int:
        """Start the workers and supervise them until SIGTERM/SIGINT has stopped them all; the sentences they
        translated. A worker that fails while starting stops the server with its reason (WorkerError)."""
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for k in range(self.cfg.workers):
                self.workers.append(self._start(k))
            if self.stopping:  # a signal came while they were starting
                self._stop()
            while not all(w.ended for w in self.workers):
                wait([w.conn for w in self.workers if not w.ended]
                     + [w.process.sentinel for w in self.workers if not w.ended], timeout=POLL_SECONDS)
                for k, worker in enumerate(self.workers):
                    self._supervise(k, worker)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for worker in self.workers:  # only after a failure in the parent itself: none is left running
                if worker.process.is_alive():
                    worker.process.kill()
                worker.process.join()
        if self.failure:
            raise self.failure
        return self.served

    def _start(self, k: int) -> Worker:
        """Start worker ``k`` (again: one that died while searching is marked idle)."""
        self.searching[k] = 0
        reader, writer = self.context.Pipe(duplex=False)
        process = self.context.Process(target=worker_main, args=(self.cfg, self.port, writer, self.searching, k),
                                       name="nmt-serve-worker")
        process.start()
        writer.close()  # the worker holds the other copy: its exit ends the pipe
        return Worker(process, reader)

    def _stop(self, signum: int | None = None, frame: Any = None) -> None:
        self.stopping = True
        for worker in self.workers:
            if worker.process.is_alive():
                worker.process.terminate()  # SIGTERM: the worker drains, then exits

    def _supervise(self, k: int, worker: Worker) -> None:
        """Act on what worker ``k`` said, and on its end."""
        for message in worker.messages():
            kind = message[0]
            if kind == "ready":
                if self.announced:
                    self.say(f"nmt-serve: worker {k} is serving again")
                worker.ready = True
                if not self.announced and all(w.ready for w in self.workers):
                    self.announced = True
                    self.on_ready(message[1], message[2])
            elif kind == "error" and not self.stopping:
                if self.announced:
                    self.say(f"nmt-serve: worker {k}: {message[2]}")
                else:
                    self.failure = WorkerError(message[2], message[1])
                    self._stop()
            elif kind == "stopped":
                self.served += message[1]
        if worker.ended or worker.process.is_alive():
            return
        worker.ended = True
        worker.process.join()
        worker.conn.close()
        if self.stopping:
            return
        if not self.announced:  # died while loading without a word (killed): the server cannot start as asked
            self.failure = WorkerError(f"a server process exited with code {worker.process.exitcode} while loading "
                                       "the model; see the lines above")
            self._stop()
            return
        self.say(f"nmt-serve: worker {k} exited with code {worker.process.exitcode}; starting another")
        self.lost += 1
        self.workers[k] = self._start(k)
