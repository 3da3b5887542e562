"""A real model folder and a real nmt-serve process for the server and page tests.

The model is the fairseq Multi30k model in ../shared/peer (imported with its Moses + BPE pipeline, then
exported as a model folder, so it translates raw text);
tests that use it skip when the shared folder is absent. The server runs as its own process on a free
localhost port and is stopped with SIGTERM, which must end it with exit code 0."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from shared_paths import MULTI30K, PEER_FAIRSEQ


def cli_command(name: str) -> list[str]:
    script = shutil.which(name)
    module = name.replace("nmt-", "").replace("-", "_")
    return [script] if script else [sys.executable, "-c", f"from nmt.cli.{module} import main; main()"]


def export_peer_model(folder: Path) -> tuple[Path, Path, Path]:
    """(data-bin, checkpoint, model folder) of the imported fairseq Multi30k model, made under ``folder``."""
    if not (PEER_FAIRSEQ / "checkpoint_best.pt").is_file():
        pytest.skip(f"no shared fairseq model at {PEER_FAIRSEQ}")
    data, ckpt, model = folder / "bin", folder / "ours.pt", folder / "model"
    steps = [
        [*cli_command("nmt-import-fairseq"), "data", "--path", str(PEER_FAIRSEQ / "data-bin"), "--output", str(data),
         "--source-lang", "en", "--target-lang", "de", "--tokenizer", "moses", "--bpe", "subword_nmt",
         "--bpe-codes", str(PEER_FAIRSEQ / "bpe.codes")],
        [*cli_command("nmt-import-fairseq"), "checkpoint", "--path", str(PEER_FAIRSEQ / "checkpoint_best.pt"),
         "--data", str(data), "--output", str(ckpt)],
        [*cli_command("nmt-export"), str(data), "--path", str(ckpt), "--output", str(model)],
    ]
    for argv in steps:
        subprocess.run(argv, check=True, capture_output=True, text=True)
    return data, ckpt, model


def raw_test_sentences(count: int) -> list[str]:
    """The first ``count`` raw English sentences of Multi30k test2016 (the model folder tokenizes and BPEs them
    as the data-bin's test split was made: Moses, then the peer's BPE codes)."""
    with gzip.open(MULTI30K / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for _, line in zip(range(count), f)]


def http(url: str, body: Any = None, *, raw: bytes | None = None, timeout: float = 60,
         method: str | None = None) -> tuple[int, Any, dict[str, str]]:
    """(status, parsed JSON body, headers) of one request; error statuses are returned, not raised."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            payload = r.read()
            status, headers = r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        payload, status, headers = e.read(), e.code, dict(e.headers)
    try:
        return status, json.loads(payload), headers
    except json.JSONDecodeError:
        return status, payload.decode("utf-8", "replace"), headers


class Server:
    """``nmt-serve ARGS --port 0`` as a child process; ``url`` is its base URL once /health answers."""

    def __init__(self, args: list[str], ready_timeout: float = 120):
        self.process = subprocess.Popen([*cli_command("nmt-serve"), *args, "--port", "0"], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.process.stderr is not None
        seen = ""
        found = None
        while found is None:
            line = self.process.stderr.readline()
            if not line:
                self.process.kill()
                raise AssertionError(f"nmt-serve did not start: {seen}{self.process.stderr.read()}")
            seen += line
            found = re.search(r"on (http://\S+?)/? \(", line)
        self.url = found.group(1).rstrip("/")
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            try:
                if http(self.base + "/health", timeout=5)[0] == 200:
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise AssertionError("nmt-serve did not answer /health in time")

    @property
    def base(self) -> str:
        """The URL of the routes (the printed URL holds --url-root)."""
        return self.url

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then the exit code once the process ended."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()


def serve(args: list[str]) -> Iterator[Server]:
    """A generator for fixtures: the running server, stopped afterwards (its exit code must be 0)."""
    server = Server(args)
    try:
        yield server
    finally:
        code = server.stop()
        errors = server.process.stderr.read() if server.process.stderr else ""
        assert code == 0, f"nmt-serve exited with {code} after SIGTERM: {errors}"
