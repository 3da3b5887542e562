"""Serve a model over HTTP (nmt-serve MODEL_DIR [--host 127.0.0.1] [--port 5000]): OpenNMT-py's
POST /translate, nmt's POST /v1/translate, GET /health, GET /models, OpenAPI docs at /docs, and a page
at / that translates and draws the encoder-decoder attention. Concurrent requests are batched together.
With --workers N, N processes share the port, each with its own copy of the model (more sentences per
second from many concurrent clients on a CPU); on Linux the kernel spreads new connections evenly over
them. SIGTERM or Ctrl-C lets in-flight requests finish, then exits 0."""

from __future__ import annotations

import click

from nmt.cli.common import config_command
from nmt.config.serve import ServeJob
from nmt.errors import UsageError


def run(cfg: ServeJob) -> None:
    try:
        import fastapi  # noqa: F401  (nmt.serve.app is built on it)
        import uvicorn  # noqa: F401
    except ImportError:
        raise UsageError("nmt-serve needs FastAPI and uvicorn: pip install 'nmt[serve]'") from None

    from nmt.hardware import cores_per_process
    from nmt.serve.process import model_location, serve
    from nmt.serve.sockets import listening_socket, worker_port
    from nmt.serve.workers import WorkerPool

    root = cfg.route_prefix()  # a bad --url-root is refused before anything is loaded or bound
    path, _ = model_location(cfg)
    if cfg.workers == 1:
        sock, workers_port = listening_socket(cfg.host, cfg.port), None
    else:
        sock, workers_port = worker_port(cfg.host, cfg.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host

    def announce(source_lang: str, target_lang: str) -> None:
        processes = f" in {cfg.workers} processes" if cfg.workers > 1 else ""
        click.echo(f"nmt-serve: {source_lang}->{target_lang} model {path}{processes} on http://{shown}:{port}{root}/ "
                   f"(POST {root}/translate, POST {root}/v1/translate, docs at {root}/docs)", err=True)

    lost = 0  # workers that died while serving: their sentences are not counted
    if workers_port is None:
        served = serve(cfg, lambda: sock, lambda model: announce(model.source_lang, model.target_lang))
    else:
        if not cfg.inference.threads:  # the cores shared out, as nmt-train does among its processes
            cfg.inference.threads = cores_per_process(cfg.workers)
        pool = WorkerPool(cfg, workers_port, announce, lambda line: click.echo(line, err=True))
        served, lost = pool.run(), pool.lost
    died = f", not counting those of the {lost} worker(s) that died" if lost else ""
    click.echo(f"nmt-serve: stopped after {served} sentences{died}", err=True)


main = config_command("nmt-serve", ServeJob, run, help=__doc__, arguments={"data": "data"})
