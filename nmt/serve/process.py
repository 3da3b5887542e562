"""One server process: the model, its dynamic batcher, and uvicorn answering HTTP on a listening socket.

The searches run in the main thread (see ``DynamicBatcher.run``), uvicorn in a thread beside it. SIGTERM or
SIGINT lets in-flight requests finish (idle connections, and requests whose body has not come, end at once:
nmt.serve.connections), then ``serve`` returns. nmt-serve runs it once, or in each of its
``--workers`` processes (nmt.serve.workers)."""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
from typing import Any, Callable, Optional

from nmt.api import TranslationModel
from nmt.config.generate import GenerationConfig
from nmt.config.serve import ServeJob
from nmt.errors import UsageError
from nmt.serve.batcher import DynamicBatcher, Job
from nmt.serve.cores import SharedCores


def model_location(cfg: ServeJob) -> tuple[str, str]:
    """(checkpoint or model folder, data-bin or model folder) of the model to serve; a UsageError without one."""
    from nmt.generation.loading import model_and_data

    data, path = model_and_data(cfg.data, cfg.inference.path)
    if not data or not path:
        raise UsageError("MODEL_DIR is required: a model folder written by nmt-export (or DATA --path CKPT)")
    return path, data


def warm_up(model: TranslationModel, gen: GenerationConfig, new_batcher: Callable[[], DynamicBatcher]) -> None:
    """--compile: the default search on made-up traffic before the first request, so that the kinds of decoder step
    a server meets (first and later steps, one sentence or many, sources with or without padding, beams
    reordered, sentences joining a running search) are compiled now instead of during the first requests.
    A separate batcher of the server's settings (``new_batcher``) runs in this thread, as the real one will,
    while a feeder thread sends it a lone sentence, three of one length, waves of one-sentence requests of mixed
    lengths that join each other's searches, and short sentences that join long ones and end first. Another
    search (a request's own beam, alignment) compiles on first use."""
    start = time.perf_counter()
    print("nmt-serve: --compile: compiling the decoder step before serving (a minute or more)", file=sys.stderr,
          flush=True)
    batcher = new_batcher()

    def request(*words: int) -> Any:
        sentences = [" ".join(["a"] * n) for n in words]
        return batcher.submit(Job(sentences, [model.encode(s) for s in sentences], gen))

    def feed() -> None:
        try:
            request(5).result()
            request(6, 6, 6).result()  # no padding
            for wave in range(4):
                futures = [request(1 + (7 * k + wave) % 23) for k in range(12)]
                futures[0].result()  # the rest of the wave and the next one join running searches
            for f in futures:
                f.result()
            for words in ((30, 28, 26), (30,)):  # short ones join long ones, end first, and leave one or several
                longs = [request(n) for n in words]  # sentences in a merged search
                time.sleep(0.05)
                request(2).result()
                for f in longs:
                    f.result()
        finally:
            batcher.close()

    feeder = threading.Thread(target=feed, name="nmt-warm-up", daemon=True)
    feeder.start()
    batcher.run()
    feeder.join()
    print(f"nmt-serve: --compile: compiled in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)


def serve(cfg: ServeJob, listen: Callable[[], socket.socket], on_ready: Callable[[TranslationModel], None],
          cores: Optional[SharedCores] = None) -> int:
    """Load the model, serve the socket ``listen`` gives until SIGTERM/SIGINT and the drain that follows; the
    sentences translated. ``listen`` and then ``on_ready`` are called once the model is loaded and the default
    search checked (and compiled), before the first request. ``cores``: a worker's share of the server's cores."""
    import uvicorn

    from nmt.api import load
    from nmt.serve.app import TranslationService, build_app
    from nmt.serve.connections import StoppingServer
    path, data = model_location(cfg)
    model = load(path, data, engine=cfg.inference.engine, bf16=cfg.inference.bf16, quantize=cfg.inference.quantize,
                 compile=cfg.inference.compile, threads=cfg.inference.threads,
                 trust_compiled=cfg.inference.trust_compiled, seed=cfg.common.seed, glossary=cfg.glossary)
    model.engine.scores = False  # answers carry each hypothesis's score, no per-token ones (nmt.engines.selection)

    def new_batcher() -> DynamicBatcher:
        return DynamicBatcher(model, max_tokens=cfg.inference.max_tokens or 8192,
                              max_sentences=cfg.inference.batch_size or 128,
                              wait_seconds=cfg.batch_wait_ms / 1000, max_queue=cfg.max_queue, cores=cores)

    batcher = new_batcher()
    service = TranslationService(model, batcher, cfg)
    default = service.search({})  # the default search is checked before the first request
    if cfg.inference.compile:
        warm_up(model, default, new_batcher)
    app = build_app(service, start_batcher=False)
    sock = listen()
    server = StoppingServer(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                           timeout_graceful_shutdown=int(cfg.drain_seconds)), app.state.stopping)

    def http() -> None:  # uvicorn in a thread; it drains on should_exit, then its lifespan closes the batcher
        try:
            server.run(sockets=[sock])
        finally:
            batcher.close(0)

    def stop(signum: int, frame: Any) -> None:
        server.should_exit = True

    # before the server is announced: a SIGTERM sent as soon as it is would otherwise kill it
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    thread = threading.Thread(target=http, name="nmt-http", daemon=True)
    try:
        on_ready(model)
        thread.start()
        batcher.run()  # the searches, in the main thread (see DynamicBatcher.run), until the server stops
        thread.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return batcher.stats.sentences
