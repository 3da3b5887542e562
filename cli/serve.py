"""Serve a model over HTTP (nmt-serve MODEL_DIR [--host 127.0.0.1] [--port 5000]): OpenNMT-py's
POST /translate, nmt's POST /v1/translate, GET /health, GET /models, OpenAPI docs at /docs, and a page
at / that translates and draws the encoder-decoder attention. Concurrent requests are batched together.
SIGTERM or Ctrl-C lets in-flight requests finish, then exits 0."""

from __future__ import annotations

import errno
import signal
import socket
import threading
from typing import Any

import click

from nmt.cli.common import config_command
from nmt.config.serve import ServeJob
from nmt.errors import UsageError


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket (port 0: a free one); a busy or foreign address is one line."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise UsageError(f"--host {host}: not an address of this machine; use 127.0.0.1 or 0.0.0.0") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit it: an answer's headers and body leave at once instead of the body waiting
    # for the client's delayed ACK (40 ms per request on a kept-alive connection)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise UsageError(f"--port {port}: already in use on {host}; stop the other server or pick another "
                             "port (--port 0 picks a free one)") from None
        raise UsageError(f"--host {host} --port {port}: cannot listen there ({e.strerror})") from None
    sock.listen(2048)
    return sock


def run(cfg: ServeJob) -> None:
    try:
        import fastapi  # noqa: F401  (nmt.serve.app is built on it)
        import uvicorn
    except ImportError:
        raise UsageError("nmt-serve needs FastAPI and uvicorn: pip install 'nmt[serve]'") from None

    from nmt.api import load
    from nmt.generation.inference import model_and_data
    from nmt.serve.app import TranslationService, build_app
    from nmt.serve.batcher import DynamicBatcher

    data, path = model_and_data(cfg.data, cfg.inference.path)
    if not data or not path:
        raise UsageError("MODEL_DIR is required: a model folder written by nmt-export (or DATA --path CKPT)")
    sock = listening_socket(cfg.host, cfg.port)
    model = load(path, data, bf16=cfg.inference.bf16, quantize=cfg.inference.quantize, threads=cfg.inference.threads,
                 seed=cfg.common.seed)
    batcher = DynamicBatcher(model, max_tokens=cfg.inference.max_tokens or 8192,
                             max_sentences=cfg.inference.batch_size or 128,
                             wait_seconds=cfg.batch_wait_ms / 1000, max_queue=cfg.max_queue)
    service = TranslationService(model, batcher, cfg)
    service.search({})  # the default search is checked before the first request
    app = build_app(service, start_batcher=False)
    host, port = sock.getsockname()[:2]
    root = cfg.route_prefix()
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"nmt-serve: {model.source_lang}->{model.target_lang} model {path} on http://{shown}:{port}{root}/ "
               f"(POST {root}/translate, POST {root}/v1/translate, docs at {root}/docs)", err=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                           timeout_graceful_shutdown=int(cfg.drain_seconds)))

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
    click.echo(f"nmt-serve: stopped after {batcher.stats.sentences} sentences", err=True)


main = config_command("nmt-serve", ServeJob, run, help=__doc__, arguments={"data": "data"})
