"""A real nmt-serve on localhost for the serving benchmarks (serve_fairness, serve_memory): started on a free port,
sent requests, its resident memory read, stopped with SIGTERM; and a tiny model to smoke-test them with."""

from __future__ import annotations

import argparse
import http.client
import json
import random
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

from benchmarks import MULTI30K, PEER_MODEL, existing, model_inputs, nmt_command, run_nmt
from nmt.errors import NmtError
from nmt.fileio import open_text

DEFAULT_SENTENCES = MULTI30K / "test_2016_flickr.en.gz"
WORDS = ("a man dog woman child street ball red blue green runs sits plays jumps near under with the on in "
         "water grass bike car small big old young").split()


class ServeProcess:
    """``nmt-serve MODEL --port 0 FLAGS`` on 127.0.0.1 until ``stop``; ``post`` sends JSON to a route."""

    def __init__(self, model: Path, flags: list[str], ready_seconds: float = 300):
        self.process = subprocess.Popen(nmt_command("nmt-serve", model, "--host", "127.0.0.1", "--port", 0, *flags),
                                        stderr=subprocess.PIPE, text=True)
        assert self.process.stderr is not None
        line, seen = "", ""
        while (found := re.search(r"http://([\d.]+):(\d+)", line)) is None:
            line = self.process.stderr.readline()
            seen += line
            if not line:
                raise NmtError(f"nmt-serve did not start (exit code {self.process.wait()}): {seen.strip()[-300:]}")
        self.host, self.port = found.group(1), int(found.group(2))

    def connection(self, timeout: float = 600) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def post(self, path: str, body: Any, connection: http.client.HTTPConnection | None = None) -> tuple[int, Any]:
        """(status, parsed answer) of one POST; on ``connection`` (kept alive) when given."""
        conn = connection or self.connection()
        try:
            conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"null")
        finally:
            if connection is None:
                conn.close()

    def health(self) -> dict[str, Any]:
        conn = self.connection(timeout=60)
        try:
            conn.request("GET", "/health")
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def resident_mb(self) -> float:
        """Resident memory of the server and every process it started (its --workers), in MB."""
        return sum(resident_kb(pid) for pid in process_tree(self.process.pid)) / 1024

    def stop(self) -> int:
        """SIGTERM, then the exit code (the server drains first)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(120)
        finally:
            if self.process.poll() is None:
                self.process.kill()


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux /proc; ``pid`` alone elsewhere)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            todo += [int(c) for c in Path(f"/proc/{current}/task/{current}/children").read_text().split()]
        except OSError:
            pass
    return found


def resident_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:  # ended meanwhile
        pass
    return 0


def read_sentences(path: str | Path) -> list[str]:
    with open_text(existing(path, "--sentences", "give raw source sentences, one per line (plain or .gz)")) as f:
        sentences = [line.strip() for line in f if line.strip()]
    if not sentences:
        raise NmtError(f"--sentences {path}: no sentences in it")
    return sentences


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def tiny_model(work: Path, pairs: int = 300) -> tuple[Path, Path]:
    """(model folder, its raw English text) of a tiny model trained for a few updates on made-up sentences (en ->
    upper-cased en): it translates badly and fast, enough to run a serving benchmark end to end."""
    rng = random.Random(0)
    raw = work / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", pairs), ("test", 50)):
        en = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + " ." for _ in range(n)]
        (raw / f"{split}.en").write_text("".join(f"{s}\n" for s in en), encoding="utf-8")
        (raw / f"{split}.de").write_text("".join(f"{s.upper()}\n" for s in en), encoding="utf-8")
    data, save, model = work / "bin", work / "checkpoints", work / "model"
    run_nmt("nmt-preprocess", "--source-lang", "en", "--target-lang", "de", "--trainpref", raw / "train",
            "--testpref", raw / "test", "--destdir", data, "--joined-dictionary", "--tokenizer", "moses", "--bpe",
            "subword_nmt", "--bpe-merges", "50")
    run_nmt("nmt-train", data, "--arch", "transformer_tiny", "--encoder-layers", "1", "--decoder-layers", "1",
            "--share-all-embeddings", "--max-tokens", "512", "--max-update", "4", "--num-threads", "1",
            "--disable-validation", "--no-progress-bar", "--save-dir", save)
    run_nmt("nmt-export", data, "--path", save / "checkpoint_last.pt", "--output", model)
    return model, raw / "test.en"


def add_model_arguments(parser: argparse.ArgumentParser, big_help: str) -> None:
    """--model, --peer or --tiny (the model to serve), --sentences (what the clients send), and the server's
    --threads, --big (its --max-request-sentences: ``big_help`` says what the benchmark sends) and --server-flags."""
    parser.add_argument("--model", help="a model folder (nmt-export) [default: the --peer model, imported and "
                        "exported into a temporary folder]")
    parser.add_argument("--peer", default=str(PEER_MODEL), help="without --model: a fairseq 0.12 model folder "
                        "[default: %(default)s]")
    parser.add_argument("--tiny", action="store_true", help="instead: a tiny model trained here (a smoke run)")
    parser.add_argument("--sentences", help=f"raw source sentences, one per line [default: {DEFAULT_SENTENCES}; "
                        "with --tiny, its own]")
    parser.add_argument("--threads", type=int, default=2, help="nmt-serve --threads")
    parser.add_argument("--big", type=int, default=256, help=f"{big_help} (the server's --max-request-sentences "
                        "is set to it)")
    parser.add_argument("--server-flags", default="", help="more nmt-serve flags, space-separated")


def served_model(args: argparse.Namespace, work: Path) -> tuple[Path, list[str]]:
    """(model folder, the clients' sentences) of ``add_model_arguments``' options; anything made goes in ``work``."""
    sentences = DEFAULT_SENTENCES
    if args.tiny:
        model, sentences = tiny_model(work)
    elif args.model:
        model = existing(args.model, "--model", "give a model folder (nmt-export)")
    else:
        data, checkpoint, _ = model_inputs(None, None, args.peer, work)
        model = work / "model"
        run_nmt("nmt-export", data, "--path", checkpoint, "--output", model)
    return model, read_sentences(args.sentences or sentences)
