"""How long one client's one-sentence request waits while another client hogs nmt-serve with the largest request
it allows, sent again as soon as it is answered.

A real server on 127.0.0.1 (``nmt-serve MODEL --port 0``): first the small client alone sends ``--requests``
one-sentence requests, one after the other (the unloaded latency); then the same while the hogging client loops
on requests of ``--big`` sentences (the server's --max-request-sentences). Printed: p50 and p95 of both, the
ratio of the p95s, and the hogging client's sentences/s. The server hands a search's room out one sentence per
request in turn, a search holding one bounded batch (--batch-size sentences, --max-tokens tokens), so the ratio
stays small: a lone sentence waits for a running sentence to end, then decodes in that batch. Each phase is
bounded in requests and seconds; the server is stopped at the end.

    python -m benchmarks run serve_fairness [--model MODEL_DIR] [--beam 5] [--threads 2] [--big 256] [--requests 100]
    python -m benchmarks run serve_fairness --tiny        # a smoke run on a tiny model trained here in seconds
    python -m benchmarks.serve_fairness ARGS                 # the same without the suite's runner
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.serve_process import ServeProcess, add_model_arguments, percentile, served_model
from nmt.errors import NmtError


def small_client(server: ServeProcess, sentence: str, requests: int, seconds: float) -> list[float]:
    """Latencies (s) of up to ``requests`` one-sentence requests sent one after the other for ``seconds`` at most."""
    latencies: list[float] = []
    connection = server.connection()
    stop_at = time.monotonic() + seconds
    try:
        while len(latencies) < requests and time.monotonic() < stop_at:
            start = time.perf_counter()
            status, answer = server.post("/translate", [{"src": sentence}], connection)
            if status != 200:
                raise NmtError(f"the one-sentence request got {status}: {answer}")
            latencies.append(time.perf_counter() - start)
            time.sleep(0.02)  # as a person's client would, not back to back
    finally:
        connection.close()
    return latencies


class HoggingClient(threading.Thread):
    """Sends ``big`` sentences per request, again as soon as answered, until ``stop``."""

    def __init__(self, server: ServeProcess, sentences: list[str], big: int):
        super().__init__(name="hogging-client", daemon=True)
        self.server = server
        self.body = [{"src": sentences[k % len(sentences)]} for k in range(big)]
        self.stopping = threading.Event()
        self.answered = 0  # sentences
        self.seconds = 0.0
        self.failure = ""

    def run(self) -> None:
        connection = self.server.connection()
        start = time.perf_counter()
        try:
            while not self.stopping.is_set():
                status, answer = self.server.post("/translate", self.body, connection)
                if status != 200:
                    self.failure = f"the large request got {status}: {answer}"
                    return
                self.answered += len(self.body)
                self.seconds = time.perf_counter() - start
        finally:
            connection.close()

    def stop(self, seconds: float) -> None:
        self.stopping.set()
        self.join(seconds)  # its last request is answered first (it is not timed)


def main(argv: list[str]) -> str:
    ap = argparse.ArgumentParser(prog="serve_fairness", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(ap, "sentences per hogging request")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--requests", type=int, default=100, help="one-sentence requests per phase (p95 over them)")
    ap.add_argument("--seconds", type=float, default=120, help="each phase stops after this long at most")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="serve_fairness.") as tmp:
        model, sentences = served_model(args, Path(tmp))
        lone = sorted(sentences, key=lambda s: len(s.split()))[len(sentences) // 2]  # a sentence of median length
        flags = ["--beam", str(args.beam), "--threads", str(args.threads), "--max-request-sentences", str(args.big),
                 *args.server_flags.split()]
        if args.tiny:
            flags += ["--max-len-b", "20"]  # an untrained model's outputs run to the length limit
        server = ServeProcess(model, flags)
        try:
            small_client(server, lone, 5, args.seconds)  # warm-up
            unloaded = small_client(server, lone, args.requests, args.seconds)
            hog = HoggingClient(server, sentences, args.big)
            hog.start()
            time.sleep(0.5)  # its first request is being searched
            loaded = small_client(server, lone, args.requests, args.seconds)
            hog.stop(args.seconds)
            if hog.failure:
                raise NmtError(hog.failure)
        finally:
            code = server.stop()
        if code:
            raise NmtError(f"nmt-serve exited with {code} after SIGTERM")
    p95 = (percentile(unloaded, 0.95) * 1000, percentile(loaded, 0.95) * 1000)
    p50 = (statistics.median(unloaded) * 1000, statistics.median(loaded) * 1000)
    rate = hog.answered / hog.seconds if hog.seconds else 0.0
    print(f"one-sentence request ({len(lone.split())} words), beam {args.beam}, --threads {args.threads}:")
    print(f"  unloaded: p50 {p50[0]:.1f} ms, p95 {p95[0]:.1f} ms ({len(unloaded)} requests)")
    print(f"  beside a client sending {args.big}-sentence requests in a loop: p50 {p50[1]:.1f} ms, p95 {p95[1]:.1f} ms "
          f"({len(loaded)} requests); that client got {rate:.1f} sentences/s")
    print(f"  p95 loaded / unloaded: {p95[1] / p95[0]:.2f}x")
    return (f"one-sentence p95 unloaded {p95[0]:.1f} ms, beside {args.big}-sentence requests {p95[1]:.1f} ms "
            f"({p95[1] / p95[0]:.2f}x; p50 {p50[0]:.1f} / {p50[1]:.1f} ms), the large requests {rate:.1f} sentences/s; "
            f"beam {args.beam}, --threads {args.threads}")


if __name__ == "__main__":
    print(main(sys.argv[1:]))
