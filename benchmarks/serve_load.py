"""nmt-serve under load, beside nmt-generate's batch throughput on the same model in the same run.

A real server on localhost (``nmt-serve MODEL --port 0``) gets test_2016_flickr sentences, one per
request (OpenNMT-py's POST /translate), from 1, 8, 32 and 64 concurrent clients, each level bounded in
requests and seconds; each client keeps one HTTP/1.1 connection. Printed per level: sentences/s, p50 and
p95 latency, and sentences/s as a share of ``nmt-generate --batch-size 128``'s (the search time it
reports, loading excluded: the stricter comparison; run just before each level, with the server stopped
meanwhile). Then the latency of one 13-token sentence sent alone, repeatedly, with the server's beam and
greedy (the sentence of --sentences closest to 13 tokens).

    python -m benchmarks run serve_load                  # the peer fairseq model, imported and exported
    python -m benchmarks run serve_load --model MODEL_DIR --data DATA_BIN --sentences RAW_TEST_SOURCE [--beam 5]
        [--threads 2] [--workers 2]
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import contextlib
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from benchmarks import MULTI30K, PEER_MODEL, data_bin, existing, model_inputs, nmt_command, run_nmt
from benchmarks.serve_process import percentile
from nmt.errors import NmtError, UsageError
from nmt.fileio import open_text

SPEED = re.compile(r"\(([\d.]+) sentences/s")


def prepare_peer(peer: str, work: Path) -> tuple[Path, Path]:
    """(model folder, data-bin) of the peer fairseq model: imported with its Moses + BPE pipeline, then exported."""
    data, checkpoint, _ = model_inputs(None, None, peer, work)
    model = work / "model"
    run_nmt("nmt-export", data, "--path", checkpoint, "--output", model)
    return model, data


def precision_flags(quantize: str, bf16: bool) -> list[str]:
    """The precision options nmt-generate and nmt-serve both take."""
    return ["--bf16"] if bf16 else ["--quantize", quantize]


def generate_speed(model: Path, data: Path, beam: int, threads: int, precision: list[str]) -> float:
    output = run_nmt("nmt-generate", data, "--path", model, "--gen-subset", "test", "--beam", beam, "--batch-size",
                     128, "--threads", threads, *precision, "--quiet")
    found = SPEED.search(output)
    if not found:
        raise NmtError(f"nmt-generate printed no speed line: {output.strip()[-300:]}")
    return float(found.group(1))


class Server:
    def __init__(self, model: Path, beam: int, threads: int, precision: list[str], workers: int = 1,
                 server_flags: tuple[str, ...] = ()):
        self.process = subprocess.Popen(nmt_command("nmt-serve", model, "--port", 0, "--beam", beam, "--threads",
                                                    max(1, threads // workers), "--workers", workers, *precision,
                                                    *server_flags),
                                        stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert self.process.stderr is not None
        line = ""
        while "http://" not in line:
            line = self.process.stderr.readline()
            if not line:
                raise NmtError(f"nmt-serve did not start (exit code {self.process.wait()})")
        found = re.search(r"http://([\d.]+):(\d+)", line)
        assert found
        self.host, self.port = found.group(1), int(found.group(2))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                connection = http.client.HTTPConnection(self.host, self.port, timeout=5)
                connection.request("GET", "/health")
                if connection.getresponse().status == 200:
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise NmtError("nmt-serve did not answer /health within 120 s")

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The server and its workers stopped (SIGSTOP) meanwhile: a server that has just served a level keeps
        working for a while (measured: nmt-generate beside an idle `--workers 2` server that had just started ran
        7-13% slower than alone), and nmt-generate's figure is the yardstick, so it runs alone."""
        os.killpg(self.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def load_level(server: Server, sentences: list[str], clients: int, max_requests: int, max_seconds: float,
               beam: int | None = None) -> tuple[float, list[float], int, Counter[int]]:
    """(sentences/s, latencies in s, errors, clients per server process) of ``clients`` concurrent clients sending
    one sentence per request (OpenNMT-py's /translate; with ``beam``, the native /v1/translate asking for that
    beam). A client's connection stays with the process that accepted it; /health on it names that process."""
    latencies: list[float] = []
    processes: Counter[int] = Counter()
    ends: list[float] = []
    errors = [0]
    next_index = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + max_seconds

    def client() -> None:
        connection = http.client.HTTPConnection(server.host, server.port, timeout=120)
        while time.monotonic() < stop_at:
            with lock:
                if next_index[0] >= max_requests:
                    break
                i = next_index[0]
                next_index[0] += 1
            sentence = sentences[i % len(sentences)]
            path, request = (("/translate", [{"src": sentence, "id": 100}]) if beam is None
                             else ("/v1/translate", {"text": [sentence], "beam": beam}))
            body = json.dumps(request).encode()  # bytes: http.client sends headers and body in one packet
            start = time.perf_counter()
            connection.request("POST", path, body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            payload = response.read()
            took = time.perf_counter() - start
            with lock:
                if response.status == 200 and json.loads(payload):
                    latencies.append(took)
                else:
                    errors[0] += 1
        ended = time.perf_counter()
        connection.request("GET", "/health")  # outside the level's clock: the process serving this connection
        process = json.loads(connection.getresponse().read()).get("process", 0)
        with lock:
            ends.append(ended)
            processes[process] += 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = max(ends) - start
    return len(latencies) / wall, latencies, errors[0], processes


def main(argv: list[str]) -> str:
    ap = argparse.ArgumentParser(prog="serve_load", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a model folder (with --data) [default: the --peer model, imported and exported "
                    "into a temporary folder]")
    ap.add_argument("--data", help="the data-bin of --model's test split (nmt-generate's yardstick)")
    ap.add_argument("--peer", default=str(PEER_MODEL), help="without --model: a fairseq 0.12 model folder "
                    "[default: %(default)s]")
    ap.add_argument("--sentences", default=str(MULTI30K / "test_2016_flickr.en.gz"), help="the clients' raw "
                    "sentences, one per line (plain or .gz) [default: %(default)s]")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2, help="torch threads of nmt-generate and of the server (in all: "
                    "each of its --workers processes gets its share)")
    ap.add_argument("--workers", type=int, default=1, help="nmt-serve --workers: server processes")
    ap.add_argument("--quantize", default="none", choices=["none", "int8", "fp16"],
                    help="--quantize of the server and of nmt-generate")
    ap.add_argument("--bf16", action="store_true", help="--bf16 for the server and nmt-generate (instead of "
                    "--quantize)")
    ap.add_argument("--compile", dest="compile_step", action="store_true", help="nmt-serve --compile (nmt-generate "
                    "stays eager: compiling does not pay for one test set)")
    ap.add_argument("--clients", default="1,8,32,64", help="[default: %(default)s]")
    ap.add_argument("--requests", dest="max_requests", type=int, default=1000, help="requests per level at most")
    ap.add_argument("--seconds", dest="max_seconds", type=float, default=60.0, help="seconds per level at most")
    ap.add_argument("--latency-requests", type=int, default=50)
    args = ap.parse_args(argv)
    if args.bf16 and args.quantize != "none":
        raise UsageError("--bf16 and --quantize: choose one")
    with open_text(existing(args.sentences, "--sentences", "give raw source sentences, one per line")) as f:
        sentences = [line.rstrip("\n") for line in f if line.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        if args.model is None:
            model_dir, data_dir = prepare_peer(args.peer, Path(tmp))
        else:
            model_dir = existing(args.model, "--model", "give a model folder (nmt-export)")
            data_dir = data_bin(args.data, "--data")
        return serve(args, model_dir, data_dir, sentences)


def serve(args: argparse.Namespace, model_dir: Path, data_dir: Path, sentences: list[str]) -> str:
    """Every level of clients, then the lone sentence's latency: prints the table, returns the figures' line."""
    precision = precision_flags(args.quantize, args.bf16)
    server = Server(model_dir, args.beam, args.threads, precision, args.workers,
                    ("--compile",) if args.compile_step else ())
    figures = []
    try:
        print(f"beam {args.beam}, {args.threads} threads, {' '.join(precision)}, nmt-serve --workers {args.workers}"
              f"{' --compile' if args.compile_step else ''}; "
              "nmt-generate --batch-size 128 (search time) runs just before each level, while the server is "
              "stopped: this machine's speed drifts, so each share compares neighbours")
        print("| clients | sentences/s | nmt-generate | share of nmt-generate | p50 latency | p95 latency "
              "| errors | clients per server process |")
        print("|---:|---:|---:|---:|---:|---:|---:|---|")
        for n in (int(c) for c in args.clients.split(",")):
            with server.paused():
                batch_speed = generate_speed(model_dir, data_dir, args.beam, args.threads, precision)
            speed, latencies, errors, processes = load_level(server, sentences, n, args.max_requests,
                                                             args.max_seconds)
            print(f"| {n} | {speed:.1f} | {batch_speed:.1f} | {speed / batch_speed:.0%} "
                  f"| {percentile(latencies, 0.5) * 1000:.0f} ms | {percentile(latencies, 0.95) * 1000:.0f} ms "
                  f"| {errors} | {' / '.join(str(c) for _, c in processes.most_common())} |", flush=True)
            figures.append(f"{n} clients {speed:.1f} sentences/s ({speed / batch_speed:.0%})"
                           + (f", {errors} errors" if errors else ""))
        from nmt.api import load

        tokens = load(str(model_dir), threads=1).tokenize
        lone = min(sentences, key=lambda s: abs(len(tokens(s)) - 13))
        for search in sorted({args.beam, 1}, reverse=True):
            _, latencies, _, _ = load_level(server, [lone], 1, args.latency_requests, args.max_seconds, beam=search)
            print(f"one {len(tokens(lone))}-token sentence alone ({lone!r}), beam {search}, {len(latencies)} requests: "
                  f"median {statistics.median(latencies) * 1000:.1f} ms, p95 "
                  f"{percentile(latencies, 0.95) * 1000:.1f} ms")
            figures.append(f"{len(tokens(lone))}-token sentence beam {search} "
                           f"{statistics.median(latencies) * 1000:.1f} ms")
    finally:
        server.stop()
    return "; ".join(figures)
