"""One server process: the model, its dynamic batcher, and uvicorn answering HTTP on a listening socket.

The searches run in the main thread (see ``DynamicBatcher.run``), uvicorn in a thread beside it. SIGTERM or
SIGINT lets in-flight requests finish, then ``serve`` returns. nmt-serve runs it once, or in each of its
``--workers`` processes (nmt.serve.workers)."""

from __future__ import annotations

import signal
import socket
import threading
from typing import Any, Callable

from nmt.api import TranslationModel
from nmt.config.serve import ServeJob
from nmt.errors import UsageError


def model_location(cfg: ServeJob) -> tuple[str, str]:
    """(checkpoint or model folder, data-bin or model folder) of the model to serve; a UsageError without one."""
    from nmt.generation.inference import model_and_data

    data, path = model_and_data(cfg.data, cfg.inference.path)
    if not data or not path:
        raise UsageError("MODEL_DIR is required: a model folder written by nmt-export (or DATA --path CKPT)")
    return path, data


def serve(cfg: ServeJob, sock: socket.socket, on_ready: Callable[[TranslationModel], None]) -> int:
    """Load the model, serve ``sock`` until SIGTERM/SIGINT and the drain that follows; the sentences translated.
    ``on_ready`` is called once the model is loaded and the default search checked, before the first request."""
    import uvicorn

    from nmt.api import load
    from nmt.serve.app import TranslationService, build_app
    from nmt.serve.batcher import DynamicBatcher

    path, data = model_location(cfg)
    model = load(path, data, bf16=cfg.inference.bf16, quantize=cfg.inference.quantize, threads=cfg.inference.threads,
                 seed=cfg.common.seed)
    batcher = DynamicBatcher(model, max_tokens=cfg.inference.max_tokens or 8192,
                             max_sentences=cfg.inference.batch_size or 128,
                             wait_seconds=cfg.batch_wait_ms / 1000, max_queue=cfg.max_queue)
    service = TranslationService(model, batcher, cfg)
    service.search({})  # the default search is checked before the first request
    app = build_app(service, start_batcher=False)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                           timeout_graceful_shutdown=int(cfg.drain_seconds)))
    on_ready(model)

    def http() -> None:  # uvicorn in a thread; it drains on should_exit, then its lifespan closes the batcher
        try:
            server.run(sockets=[sock])
        finally:
            batcher.close(0)

    def stop(signum: int, frame: Any) -> None:
        server.should_exit = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    thread = threading.Thread(target=http, name="nmt-http", daemon=True)
    try:
        thread.start()
        batcher.run()  # the searches, in the main thread (see DynamicBatcher.run), until the server stops
        thread.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return batcher.stats.sentences
