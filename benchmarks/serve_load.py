"""nmt-serve under load, beside nmt-generate's batch throughput on the same model in the same run.

A real server on localhost (``nmt-serve MODEL --port 0``) gets test_2016_flickr sentences, one per
request (OpenNMT-py's POST /translate), from 1, 8, 32 and 64 concurrent clients, each level bounded in
requests and seconds; each client keeps one HTTP/1.1 connection. Printed per level: sentences/s, p50 and
p95 latency, and sentences/s as a share of ``nmt-generate --batch-size 128``'s (the search time it
reports, loading excluded: the stricter comparison; run just before each level, with the server stopped
meanwhile). Then the latency of one 13-token sentence sent alone, repeatedly, with the server's beam and
greedy.

    python benchmarks/serve_load.py                      # the peer fairseq model, imported and exported
    python benchmarks/serve_load.py --model MODEL_DIR --data DATA_BIN [--beam 5] [--threads 2] [--workers 2]
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import click

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared"
PEER = SHARED / "peer" / "fairseq-m30k"
RAW_TEST = SHARED / "data" / "multi30k" / "test_2016_flickr.en.gz"
SPEED = re.compile(r"\(([\d.]+) sentences/s")


def cli(name: str) -> list[str]:
    script = shutil.which(name)
    module = name.replace("nmt-", "").replace("-", "_")
    return [script] if script else [sys.executable, "-c", f"from nmt.cli.{module} import main; main()"]


def prepare_peer(folder: Path) -> tuple[Path, Path]:
    """(model folder, data-bin) of the peer fairseq Multi30k model: imported with its Moses + BPE pipeline,
    then exported."""
    data, ckpt, model = folder / "bin", folder / "ours.pt", folder / "model"
    for argv in ([*cli("nmt-import-fairseq"), "data", "--path", str(PEER / "data-bin"), "--output", str(data),
                  "--source-lang", "en", "--target-lang", "de", "--tokenizer", "moses", "--bpe", "subword_nmt",
                  "--bpe-codes", str(PEER / "bpe.codes")],
                 [*cli("nmt-import-fairseq"), "checkpoint", "--path", str(PEER / "checkpoint_best.pt"), "--data",
                  str(data), "--output", str(ckpt)],
                 [*cli("nmt-export"), str(data), "--path", str(ckpt), "--output", str(model)]):
        subprocess.run(argv, check=True, capture_output=True)
    return model, data


def precision_flags(quantize: str, bf16: bool) -> list[str]:
    """The precision options nmt-generate and nmt-serve both take."""
    return ["--bf16"] if bf16 else ["--quantize", quantize]


def generate_speed(model: Path, data: Path, beam: int, threads: int, precision: list[str]) -> float:
    done = subprocess.run([*cli("nmt-generate"), str(data), "--path", str(model), "--gen-subset", "test", "--beam",
                           str(beam), "--batch-size", "128", "--threads", str(threads), *precision, "--quiet"],
                          capture_output=True, text=True, check=True)
    found = SPEED.search(done.stdout + done.stderr)
    assert found, done.stdout + done.stderr
    return float(found.group(1))


class Server:
    def __init__(self, model: Path, beam: int, threads: int, precision: list[str], workers: int = 1,
                 server_flags: tuple[str, ...] = ()):
        self.process = subprocess.Popen([*cli("nmt-serve"), str(model), "--port", "0", "--beam", str(beam),
                                         "--threads", str(max(1, threads // workers)), "--workers", str(workers),
                                         *precision, *server_flags],
                                        stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert self.process.stderr is not None
        line = ""
        while "http://" not in line:
            line = self.process.stderr.readline()
            if not line:
                sys.exit("serve_load: nmt-serve did not start")
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
        sys.exit("serve_load: nmt-serve did not answer /health")

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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


@click.command()
@click.option("--model", type=click.Path(exists=True, file_okay=False), help="A model folder [default: the peer "
              "fairseq model, imported and exported into a temporary folder].")
@click.option("--data", type=click.Path(exists=True, file_okay=False), help="The data-bin of --model's test split.")
@click.option("--beam", default=5, show_default=True)
@click.option("--threads", default=2, show_default=True, help="torch threads of nmt-generate and of the server (in "
              "all: each of its --workers processes gets its share).")
@click.option("--workers", default=1, show_default=True, help="nmt-serve --workers: server processes.")
@click.option("--quantize", default="none", show_default=True, type=click.Choice(["none", "int8", "fp16"]),
              help="--quantize of the server and of nmt-generate.")
@click.option("--bf16", is_flag=True, help="--bf16 for the server and nmt-generate (instead of --quantize).")
@click.option("--compile", "compile_step", is_flag=True, help="nmt-serve --compile (nmt-generate stays eager: "
              "compiling does not pay for one test set).")
@click.option("--clients", default="1,8,32,64", show_default=True)
@click.option("--requests", "max_requests", default=1000, show_default=True, help="Requests per level at most.")
@click.option("--seconds", "max_seconds", default=60.0, show_default=True, help="Seconds per level at most.")
@click.option("--latency-requests", default=50, show_default=True)
def main(model: str | None, data: str | None, beam: int, threads: int, workers: int, quantize: str, bf16: bool,
         compile_step: bool, clients: str,
         max_requests: int, max_seconds: float, latency_requests: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if model is None:
            model_dir, data_dir = prepare_peer(Path(tmp))
        elif data is None:
            sys.exit("serve_load: --model needs --data (the data-bin holding its test split)")
        else:
            model_dir, data_dir = Path(model), Path(data)
        with gzip.open(RAW_TEST, "rt", encoding="utf-8") as f:
            sentences = [line.rstrip("\n") for line in f]
        if bf16 and quantize != "none":
            sys.exit("serve_load: --bf16 and --quantize: choose one")
        precision = precision_flags(quantize, bf16)
        server = Server(model_dir, beam, threads, precision, workers, ("--compile",) if compile_step else ())
        try:
            print(f"beam {beam}, {threads} threads, {' '.join(precision)}, nmt-serve --workers {workers}"
                  f"{' --compile' if compile_step else ''}; "
                  "nmt-generate --batch-size 128 (search time) runs just before each level, while the server is "
                  "stopped: this machine's speed drifts, so each share "
                  "compares neighbours")
            print("| clients | sentences/s | nmt-generate | share of nmt-generate | p50 latency | p95 latency "
                  "| errors | clients per server process |")
            print("|---:|---:|---:|---:|---:|---:|---:|---|")
            for n in (int(c) for c in clients.split(",")):
                with server.paused():
                    batch_speed = generate_speed(model_dir, data_dir, beam, threads, precision)
                speed, latencies, errors, processes = load_level(server, sentences, n, max_requests, max_seconds)
                print(f"| {n} | {speed:.1f} | {batch_speed:.1f} | {speed / batch_speed:.0%} "
                      f"| {percentile(latencies, 0.5) * 1000:.0f} ms | {percentile(latencies, 0.95) * 1000:.0f} ms "
                      f"| {errors} | {' / '.join(str(c) for _, c in processes.most_common())} |", flush=True)
            from nmt.api import load

            tokens = load(str(model_dir), threads=1).tokenize
            thirteen = next(s for s in sentences if len(tokens(s)) == 13)
            for search in sorted({beam, 1}, reverse=True):
                _, latencies, _, _ = load_level(server, [thirteen], 1, latency_requests, max_seconds, beam=search)
                print(f"one 13-token sentence alone ({thirteen!r}), beam {search}, {len(latencies)} requests: "
                      f"median {statistics.median(latencies) * 1000:.1f} ms, p95 "
                      f"{percentile(latencies, 0.95) * 1000:.1f} ms")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
