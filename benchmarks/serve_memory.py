"""nmt-serve's resident memory through probes and a load run: it must come back near its steady state.

A real server on 127.0.0.1 (``nmt-serve MODEL --port 0``), its memory (the server and its --workers) read from
/proc: steady (after a warm-up of one-sentence and largest requests, then idle), after probes (``--probes``
requests each with search options of its own, and malformed, oversized and cut-off requests), at the peak of a
load run (``--clients`` clients sending the largest request for ``--seconds``) and after it, once idle; probes
and load run repeated ``--rounds`` times. An idle server hands back the memory a burst freed (nmt.serve.batcher),
and keeps the searches of the last 64 distinct option sets only (nmt.api), so the idle figures stay within a small
margin of the steady one, round after round.

    python -m benchmarks run serve_memory [--model MODEL_DIR] [--threads 2] [--workers 1] [--clients 8]
    python -m benchmarks run serve_memory --tiny          # a smoke run on a tiny model trained here in seconds
    python -m benchmarks.serve_memory ARGS                 # the same without the suite's runner
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.serve_process import ServeProcess, add_model_arguments, served_model
from nmt.errors import NmtError
from nmt.serve.batcher import IDLE_RELEASE_SECONDS


def settled_mb(server: ServeProcess) -> float:
    """The server's memory once it has been idle long enough to hand freed memory back."""
    time.sleep(IDLE_RELEASE_SECONDS + 2)
    return server.resident_mb()


def probe(server: ServeProcess, sentences: list[str], count: int, big: int) -> None:
    """``count`` requests with distinct search options, then requests a server must refuse or survive."""
    for k in range(count):
        server.post("/v1/translate", {"text": [sentences[k % len(sentences)]], "beam": 1 + k % 8,
                                      "lenpen": 0.5 + k / count})
    for body in (b"[" * 100_000, b'[{"src": "' + b"a " * 50_000 + b'"}]', b"\xff\xfe", b"{}", b"[]"):
        conn = server.connection()
        conn.request("POST", "/translate", body, {"Content-Type": "application/json"})
        conn.getresponse().read()
        conn.close()
    too_many = [{"src": sentences[0]}] * (big + 1)
    server.post("/translate", too_many)
    for _ in range(20):  # clients that leave mid-body and mid-search
        with socket.create_connection((server.host, server.port)) as s:
            s.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: 99999\r\n\r\n[{\"src\": \"a")
        with socket.create_connection((server.host, server.port)) as s:
            payload = ('[' + ",".join('{"src": "%s"}' % sentences[k % len(sentences)].replace('"', "'")
                                      for k in range(big)) + ']').encode()
            s.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)


def load_run(server: ServeProcess, sentences: list[str], clients: int, big: int, seconds: float) -> tuple[float, int]:
    """(peak MB, requests answered) while ``clients`` send ``big``-sentence requests for ``seconds``."""
    stop_at = time.monotonic() + seconds
    answered = [0]
    lock = threading.Lock()

    def client(c: int) -> None:
        body = [{"src": sentences[(c * big + k) % len(sentences)]} for k in range(big)]
        connection = server.connection()
        try:
            while time.monotonic() < stop_at:
                status, _ = server.post("/translate", body, connection)
                if status == 200:
                    with lock:
                        answered[0] += 1
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    peak = 0.0
    while any(t.is_alive() for t in threads):
        peak = max(peak, server.resident_mb())
        time.sleep(0.2)
    return peak, answered[0]


def main(argv: list[str]) -> str:
    ap = argparse.ArgumentParser(prog="serve_memory", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(ap, "sentences of the largest request")
    ap.add_argument("--workers", type=int, default=1, help="nmt-serve --workers")
    ap.add_argument("--probes", type=int, default=500, help="requests with search options of their own")
    ap.add_argument("--clients", type=int, default=8, help="clients of the load run")
    ap.add_argument("--seconds", type=float, default=60, help="length of the load run")
    ap.add_argument("--rounds", type=int, default=2, help="probes and load run, this many times")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="serve_memory.") as tmp:
        model, sentences = served_model(args, Path(tmp))
        flags = ["--threads", str(args.threads), "--workers", str(args.workers), "--max-request-sentences",
                 str(args.big), "--max-beam", "8", *args.server_flags.split()]
        if args.tiny:
            flags += ["--max-len-b", "20"]  # an untrained model's outputs run to the length limit
        server = ServeProcess(model, flags)
        try:
            loaded = server.resident_mb()
            for k in range(10):
                server.post("/translate", [{"src": sentences[k]}])
            server.post("/translate", [{"src": s} for s in sentences[: args.big]])
            server.post("/translate", [{"src": s} for s in sentences[args.big: 2 * args.big] or sentences[: args.big]])
            steady = settled_mb(server)
            rounds = []
            for _ in range(args.rounds):
                probe(server, sentences, args.probes, args.big)
                probed = settled_mb(server)
                peak, answered = load_run(server, sentences, args.clients, args.big, args.seconds)
                rounds.append((probed, peak, answered, settled_mb(server)))
        finally:
            code = server.stop()
        if code:
            raise NmtError(f"nmt-serve exited with {code} after SIGTERM")
    print(f"resident memory of nmt-serve (--workers {args.workers}, --threads {args.threads}), MB:")
    print(f"  loaded {loaded:.0f}; steady (warmed up, idle) {steady:.0f}")
    for k, (probed, peak, answered, after) in enumerate(rounds, 1):
        print(f"  round {k}: after {args.probes} requests of distinct options and bad requests, idle {probed:.0f}; "
              f"load run ({args.clients} clients x {args.big}-sentence requests, {args.seconds:.0f} s, {answered} "
              f"answered) peak {peak:.0f}, then idle {after:.0f} ({after / steady:.2f}x steady)")
    figures = "; ".join(f"round {k}: probes {p:.0f}, load peak {q:.0f}, idle {a:.0f} ({a / steady:.2f}x)"
                        for k, (p, q, _, a) in enumerate(rounds, 1))
    return (f"MB: steady {steady:.0f}; {figures}; --workers {args.workers}, --threads {args.threads}, "
            f"{args.clients} clients x {args.big} sentences, {args.seconds:.0f} s")


if __name__ == "__main__":
    print(main(sys.argv[1:]))
