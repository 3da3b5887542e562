"""nmt-serve under clients that hog it, leave, or probe it, and its own start and stop.

The batcher (no HTTP): a large request never sits in front of a one-sentence request (the room running sentences
leave is handed out one sentence per job in turn, a search holding at most one bounded batch), a job whose client
has gone is never searched, and an idle server hands freed memory back. The real server process: a client that
leaves mid-request costs no search and leaves no traceback, SIGTERM ends idle and half-sent connections at once,
a port another nmt-serve serves is refused in every worker mode, and a bad --url-root is one line."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import CancelledError

import pytest

from batcher_setup import TOY_SENTENCES, toy_batcher
from nmt.api import KEPT_SEARCHES, load
from nmt.serve import batcher as batcher_module
from nmt.serve.batcher import DynamicBatcher, Job
from nmt.serve.sockets import kernel_balances_ports, listening_socket, worker_port
from served_model import Server, cli_command, http, raw_test_sentences


@pytest.fixture(scope="module")
def model(exported_model):
    return load(str(exported_model.folder), threads=1)


def job(model, sentences: list[str], gen) -> Job:
    return Job(sentences, [model.encode(s) for s in sentences], gen)


class HandedOut:
    """Records, in order, which job each sentence handed to a search came from; ``when`` runs after the search
    finishes its ``at``-th sentence (in the batcher's thread, between two decoding steps)."""

    def __init__(self, worker: DynamicBatcher, monkeypatch, at: int = 1, when=lambda: None):
        self.order: list[Job] = []
        self.finished = 0
        take, finished = worker.take, batcher_module.LiveSource.finished
        log = self

        def recorded(*args, **kwargs):
            taken = take(*args, **kwargs)
            log.order += [j for j, _ in taken]
            return taken

        def counted(self, sid):
            log.finished += 1
            if log.finished == at:
                when()
            return finished(self, sid)

        monkeypatch.setattr(worker, "take", recorded)
        monkeypatch.setattr(batcher_module.LiveSource, "finished", counted)


def test_a_lone_sentence_overtakes_a_large_request_after_one_of_its_sentences(model, monkeypatch):
    """A request of 40 sentences is being searched (4 at a time) when a one-sentence request comes: the next
    sentence handed to the search after the large one's is the lone one. Before, jobs were handed out whole in
    order, and the lone sentence waited for all 40."""
    gen = model.generation_config(beam=2)
    worker = toy_batcher(model)
    large = job(model, [TOY_SENTENCES[k % len(TOY_SENTENCES)] for k in range(40)], gen)
    lone = job(model, ["h i"], gen)
    log = HandedOut(worker, monkeypatch, at=1, when=lambda: worker.submit(lone))
    worker.submit(large)
    worker.start()
    assert len(lone.future.result(timeout=120)) == 1 and len(large.future.result(timeout=120)) == 40
    worker.close(60)
    before = log.order.index(lone)
    assert before <= 4 + 1, before  # the first batch (4), then at most one more sentence of the large request
    assert log.order.count(large) == 40 and worker.stats.sentences == 41


def test_beside_a_small_request_a_large_one_keeps_a_small_share_of_the_batch(model, monkeypatch):
    """A large request fills the batch (12) while alone; once a small request (here at most 2 sentences) waits, the
    large one gets no sentence more until it has fewer than 2 out, so the small one decodes in a small batch."""
    monkeypatch.setattr(batcher_module, "SMALL_REQUEST", 2)
    gen = model.generation_config(beam=2, min_len=3)
    worker = toy_batcher(model, max_sentences=12)
    large = job(model, [TOY_SENTENCES[k % len(TOY_SENTENCES)] for k in range(60)], gen)
    lone = job(model, ["h i"], gen)
    alone, grew, beside = [0], [], [0]
    take = worker.take

    def watched(*args, **kwargs):
        before = large.out
        waiting = lone in worker._jobs or lone.out > 0
        taken = take(*args, **kwargs)
        if waiting:
            beside[0] += 1
            if large.out > max(before, 2):
                grew.append((before, large.out))
        elif not lone.future.done():
            alone[0] = max(alone[0], large.out)
        return taken

    monkeypatch.setattr(worker, "take", watched)
    HandedOut(worker, monkeypatch, at=1, when=lambda: worker.submit(lone))
    worker.submit(large)
    worker.start()
    assert len(lone.future.result(timeout=120)) == 1 and len(large.future.result(timeout=120)) == 60
    worker.close(60)
    assert alone[0] > 2  # alone, the large request had more of the batch ...
    assert beside[0] and not grew, grew  # ... and got no sentence more while the small one waited or ran
    assert large.out == 0 and lone.out == 0


def test_a_request_with_other_options_waits_for_at_most_one_batch_of_a_large_one(model, monkeypatch):
    """Other search options need a search of their own: the running one stops taking the large request's
    sentences once it has had a batch's worth, so the other request waits for those to finish, not for all 40."""
    gen, other = model.generation_config(beam=2), model.generation_config(beam=1)
    worker = toy_batcher(model)
    large = job(model, [TOY_SENTENCES[k % len(TOY_SENTENCES)] for k in range(40)], gen)
    lone = job(model, ["h i"], other)
    finished_before: list[int] = []
    log = HandedOut(worker, monkeypatch, at=1, when=lambda: worker.submit(lone))
    lone.future.add_done_callback(lambda f: finished_before.append(log.finished))
    worker.submit(large)
    worker.start()
    lone.future.result(timeout=120)
    large.future.result(timeout=120)
    worker.close(60)
    assert finished_before[0] <= 2 * 4 + 1, finished_before  # a batch out, a batch more at most, then its own
    assert worker.stats.streams >= 3  # the large request, the lone one, the large request again


def test_a_job_whose_client_left_is_not_searched(model, monkeypatch):
    """A queued job whose future is cancelled (its client disconnected) is never handed to a search; one
    cancelled while running stops at the sentences it had out (a bounded batch), and the worker goes on."""
    gen = model.generation_config(beam=2)
    worker = toy_batcher(model, max_sentences=2)
    gone = job(model, TOY_SENTENCES[:3], gen)
    running = job(model, [TOY_SENTENCES[k % len(TOY_SENTENCES)] for k in range(30)], gen)
    log = HandedOut(worker, monkeypatch, at=2, when=running.future.cancel)
    worker.submit(gone)
    gone.future.cancel()
    worker.submit(running)
    worker.start()
    with pytest.raises(CancelledError):
        running.future.result(timeout=120)
    after = worker.submit(job(model, TOY_SENTENCES[3:5], gen)).result(timeout=120)
    worker.close(60)
    assert len(after) == 2
    assert gone not in log.order  # never searched
    searched = log.order.count(running)
    assert searched <= 2 + 2, searched  # two finished, at most a batch (2) out when it was cancelled
    assert worker.stats.dropped == len(TOY_SENTENCES[:3]) + 30 - searched
    assert worker.describe()["queued_sentences"] == 0


def test_an_idle_server_hands_freed_memory_back_once_after_searching(model, monkeypatch):
    released = threading.Semaphore(0)
    calls: list[float] = []

    def release() -> bool:
        calls.append(time.monotonic())
        released.release()
        return True

    monkeypatch.setattr(batcher_module, "IDLE_RELEASE_SECONDS", 0.05)
    monkeypatch.setattr(batcher_module, "release_freed_memory", release)
    worker = toy_batcher(model)
    worker.start()
    try:
        worker.submit(job(model, TOY_SENTENCES[:2], model.generation_config(beam=2))).result(timeout=120)
        assert released.acquire(timeout=60)
        assert not released.acquire(timeout=0.5)  # once per idle spell, not again while nothing is searched
        worker.submit(job(model, TOY_SENTENCES[2:3], model.generation_config(beam=2))).result(timeout=120)
        assert released.acquire(timeout=60)
    finally:
        worker.close(60)
    assert len(calls) == 2


def test_distinct_search_options_keep_a_bounded_number_of_searches(model):
    """A client sending new options with every request (here lenpen) must not grow the server's memory."""
    for k in range(KEPT_SEARCHES + 20):
        model.translator(model.generation_config(beam=2, lenpen=1.0 + k / 1000))
    assert len(model._translators) == KEPT_SEARCHES and len(model._configs) == KEPT_SEARCHES
    assert model.translate(["a b"], beam=2, lenpen=1.0) == model.translate(["a b"], beam=2, lenpen=1.0)


# ----- ports -----


def test_a_held_port_is_refused_in_every_mode_even_before_workers_listen():
    """The socket a --workers server holds its port with (SO_REUSEPORT, not listening yet): another --workers
    server and a single-process one are refused; without the probe, the second --workers server shared it."""
    holder, port = worker_port("127.0.0.1", 0)
    try:
        taken = port.port
        with pytest.raises(Exception, match=f"--port {taken}: already in use"):
            worker_port("127.0.0.1", taken)
        with pytest.raises(Exception, match=f"--port {taken}: already in use"):
            listening_socket("127.0.0.1", taken)
        workers = [port.listen() for _ in range(2)]  # the workers still bind beside it
        for sock in workers:
            sock.close()
    finally:
        holder.close()


def run_serve(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*cli_command("nmt-serve"), *argv], capture_output=True, text=True, timeout=timeout)


def port_of(server: Server) -> str:
    return server.url.rsplit(":", 1)[1].split("/")[0]


@pytest.mark.slow
@pytest.mark.skipif(not kernel_balances_ports(), reason="workers share the port with SO_REUSEPORT")
def test_a_port_another_nmt_serve_serves_is_refused_in_every_worker_mode(exported_model):
    folder = str(exported_model.folder)
    for first, second in ((["--workers", "2"], ["--workers", "2"]), (["--workers", "2"], []),
                          ([], ["--workers", "2"])):
        server = Server([folder, "--threads", "1", *first])
        try:
            done = run_serve(folder, *second, "--port", port_of(server))
            assert done.returncode == 2, (first, second, done.stderr)
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and f"--port {port_of(server)}: already in use" in lines[0], done.stderr
        finally:
            assert server.stop() == 0


# ----- --url-root -----


@pytest.mark.parametrize("root, why", [("/x?y=1", "not plain path text"), ("/a/../b", "'..' segment"),
                                       ("translator", "does not start with /"), ("/a//b", "empty segment"),
                                       ("/a b", "not plain path text"), ("/%2e%2e", "not plain path text")])
def test_a_bad_url_root_is_one_line_naming_it(exported_model, capsys, root, why):
    from nmt.cli.serve import main
    from test_generate_setup import call_cli

    assert call_cli(main, [exported_model.folder, "--port", "0", "--url-root", root]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"nmt-serve: error: --url-root {root}: "), err
    assert why in err and "/translator" in err


# ----- the real server: clients that leave, and SIGTERM -----


@pytest.fixture(scope="module")
def peer_model(peer_export):
    return peer_export[2]


def connect(server: Server) -> socket.socket:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=60)


def post_head(path: str, length: int) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
            .encode())


def read_until_closed(conn: socket.socket) -> bytes:
    got = b""
    while chunk := conn.recv(65536):
        got += chunk
    return got


def health(server: Server) -> dict:
    status, body, _ = http(server.base + "/health")
    assert status == 200, body
    return body


@pytest.mark.slow
def test_a_client_that_leaves_costs_no_search_and_no_traceback(peer_model):
    """One client leaves while sending its body, another right after sending 64 sentences: the server searches
    at most a bounded batch (--batch-size 4) of them, logs nothing, and goes on serving."""
    server = Server([str(peer_model), "--threads", "1", "--batch-size", "4", "--max-request-sentences", "64"])
    try:
        half = connect(server)
        half.sendall(post_head("/translate", 100) + b'[{"src": "A dog')
        time.sleep(0.2)
        half.close()
        body = json.dumps([{"src": s} for s in raw_test_sentences(64)]).encode()
        leaving = connect(server)
        leaving.sendall(post_head("/translate", len(body)) + body)
        time.sleep(0.2)
        leaving.close()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and health(server)["queued_sentences"]:
            time.sleep(0.1)
        status, answer, _ = http(server.base + "/translate", [{"src": "A dog runs."}])
        assert status == 200 and answer[0][0]["tgt"], answer
        figures = health(server)
        assert figures["dropped_sentences"] >= 64 - 4 * 8, figures  # a few batches at most were searched
        assert figures["sentences"] == 1, figures  # only the request that stayed was answered
    finally:
        code = server.stop()
    errors = server.process.stderr.read() if server.process.stderr else ""
    assert code == 0, errors
    assert "Traceback" not in errors and "Exception" not in errors, errors


@pytest.mark.slow
def test_sigterm_ends_idle_and_half_sent_connections_at_once(peer_model):
    """32 kept-alive connections after a request each, and 4 that sent only part of a body: SIGTERM ends the
    server (exit 0) without waiting its 30-second drain for them, and without a traceback. Before, the half-sent
    ones held it for the whole drain, then were cancelled with a CancelledError traceback each."""
    server = Server([str(peer_model), "--threads", "1", "--drain-seconds", "30"])
    held = []
    try:
        for _ in range(32):
            conn = connect(server)
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert conn.recv(65536).startswith(b"HTTP/1.1 200")
            held.append(conn)
        half = []
        for _ in range(4):
            conn = connect(server)
            conn.sendall(post_head("/translate", 100) + b'[{"src": "A')
            half.append(conn)
        time.sleep(0.5)  # the server has read the headers
        server.process.send_signal(signal.SIGTERM)
        code = server.process.wait(20)  # a hang guard: well under the drain
        answers = [read_until_closed(conn) for conn in half]
    finally:
        if server.process.poll() is None:
            server.process.kill()
        for conn in held:
            conn.close()
    errors = server.process.stderr.read() if server.process.stderr else ""
    assert code == 0, errors
    assert "Traceback" not in errors and "ERROR" not in errors, errors
    assert all(a.startswith(b"HTTP/1.1 503") and b"server stopping" in a for a in answers), answers


@pytest.mark.slow
def test_a_drain_that_runs_out_answers_503_without_a_traceback(peer_model):
    """--drain-seconds 1 while a long request is being translated: its client gets a 503 JSON error, the
    server exits 0, and its log holds uvicorn's one line about the cancelled request, no traceback."""
    server = Server([str(peer_model), "--threads", "1", "--drain-seconds", "1", "--max-request-sentences", "256",
                     "--beam", "8", "--batch-size", "8"])
    got: list = []
    try:
        client = threading.Thread(target=lambda: got.append(http(
            server.base + "/translate", [{"src": s} for s in raw_test_sentences(256)], timeout=120)))
        client.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not health(server)["searches"]:
            time.sleep(0.05)
        server.process.send_signal(signal.SIGTERM)
        code = server.process.wait(60)
        client.join(60)
    finally:
        if server.process.poll() is None:
            server.process.kill()
    errors = server.process.stderr.read() if server.process.stderr else ""
    assert code == 0, errors
    assert "Traceback" not in errors, errors
    status, answer, _ = got[0]
    assert status == 503 and answer["status"] == "error" and "stopping" in answer["error"], answer
    assert len(re.findall(r"ERROR", errors)) <= 1, errors


def test_words_never_seen_before_keep_a_bounded_bpe_cache(exported_model, monkeypatch):
    """subword-nmt remembers every word it segments: a client sending new words with every request must not grow
    the server's memory without bound."""
    from nmt.plugins.bpe import subword_nmt

    monkeypatch.setattr(subword_nmt, "CACHED_WORDS", 100)
    bpe = subword_nmt.SubwordNmtBPE(subword_nmt.SubwordNmtConfig(), exported_model.folder / "bpe.codes")
    first = bpe.encode("abc abd")
    for k in range(50):
        bpe.encode(" ".join(f"w{k}x{j}" for j in range(10)))  # 500 new words, 10 per line
        assert len(bpe._bpe.cache) <= 100 + 10
    assert bpe.encode("abc abd") == first
