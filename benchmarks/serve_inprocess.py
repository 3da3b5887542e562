"""nmt-serve's dynamic batching without HTTP: where a server's time goes when each client waits for its own sentence.

In one process, ``--clients`` threads each submit one test_2016_flickr sentence at a time to the server's
``DynamicBatcher`` (the search runs in the main thread, as in nmt-serve) until 1,000 sentences are done;
then the same sentences go through ``TranslationModel.translate_ids`` in batches of 32 and 128, as
nmt-generate batches them. Printed per run: sentences/s and, per part of the search, its total time, calls
and the average sentences and columns of the rows it advanced. The parts are timed by wrapping the beam
search's methods, which costs a few microseconds per call.

    python benchmarks/serve_inprocess.py [--model MODEL_DIR] [--clients 32] [--rounds 1]
        [--quantize fp16 | --quantize none --bf16]
"""

from __future__ import annotations

import collections
import gzip
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import click
from serve_load import RAW_TEST, prepare_peer

import nmt
from nmt.generation.ensemble import EnsembleModel
from nmt.plugins.search.beam import BeamSearch
from nmt.serve.batcher import DynamicBatcher, Job

Totals = dict[str, list[float]]  # part -> [seconds, calls, sentences, columns]


def timed(totals: Totals) -> None:
    """Wrap the beam search's parts so that each call adds to ``totals``."""

    def wrap(cls: type, name: str, label: Callable[[tuple], str] = lambda args: "") -> None:
        method = getattr(cls, name)

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                row = totals[name + label(args)]
                row[0] += time.perf_counter() - start
                row[1] += 1
                if name == "_step":
                    row[2] += len(args[1].ids)
                    row[3] += args[1].window.size(1)

        setattr(cls, name, run)

    # the long outputs' batch is not visible from here: steps of 1-2 sentences are mostly its steps (and a batch's
    # last few sentences), steps of more are the main batch's; _choose includes the reorder of the key/value cache
    # and the merge of sentences that join
    wrap(BeamSearch, "_step", lambda args: " (1-2 sentences)" if len(args[1].ids) <= 2 else " (3+ sentences)")
    for name in ("_choose", "_start", "_merge", "_split_long"):
        wrap(BeamSearch, name)
    for name in ("encode", "step", "reorder_states", "merge"):
        wrap(EnsembleModel, name)


def served(model: nmt.TranslationModel, sentences: list[str], ids: list, gen: Any, clients: int) -> float:
    """Seconds for ``clients`` threads to get every sentence translated, one request each."""
    batcher = DynamicBatcher(model, max_tokens=8192, max_sentences=128, wait_seconds=0, max_queue=2048)
    next_index = [0]
    lock = threading.Lock()

    def client() -> None:
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(sentences):
                return
            batcher.submit(Job([sentences[i]], [ids[i]], gen)).result()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    closer = threading.Thread(target=lambda: ([t.join() for t in threads], batcher.close()))
    closer.start()
    batcher.run()  # in the main thread, as nmt-serve runs it
    closer.join()
    return time.perf_counter() - start


def report(title: str, seconds: float, count: int, totals: Totals) -> None:
    print(f"{title}: {count / seconds:.1f} sentences/s ({seconds:.2f} s)")
    for part, (spent, calls, sents, cols) in sorted(totals.items()):
        shape = f", {sents / calls:.1f} sentences x {cols / calls:.1f} columns" if sents else ""
        print(f"  {part:26s} {spent:6.2f} s  {int(calls):5d} calls  {spent / calls * 1000:6.2f} ms each{shape}")
    totals.clear()


@click.command()
@click.option("--model", default=None, help="A model folder (default: the peer fairseq model, imported).")
@click.option("--clients", default=32, show_default=True)
@click.option("--beam", default=5, show_default=True)
@click.option("--quantize", default="fp16", show_default=True, type=click.Choice(["none", "int8", "fp16"]))
@click.option("--bf16", is_flag=True, help="bfloat16 weights (nmt-serve --bf16; with --quantize none).")
@click.option("--threads", default=2, show_default=True)
@click.option("--rounds", default=1, show_default=True)
def main(model: str | None, clients: int, beam: int, quantize: str, bf16: bool, threads: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(model) if model else prepare_peer(Path(tmp))[0]
        loaded = nmt.load(str(folder), threads=threads, quantize=quantize, bf16=bf16)
    with gzip.open(RAW_TEST, "rt", encoding="utf-8") as f:
        sentences = [line.rstrip("\n") for line in f]
    gen = loaded.generation_config(beam=beam)
    ids = [loaded.encode(s) for s in sentences]
    loaded.translate_ids(sentences[:64], ids[:64], gen)  # warm-up
    totals: Totals = collections.defaultdict(lambda: [0.0, 0, 0, 0])
    timed(totals)
    precision = f"--quantize {quantize}" + (", --bf16" if bf16 else "")
    print(f"beam {beam}, {precision}, {threads} threads, {len(sentences)} sentences")
    for _ in range(rounds):
        report(f"served, {clients} clients", served(loaded, sentences, ids, gen, clients), len(sentences), totals)
        for size in (32, 128):
            start = time.perf_counter()
            loaded.translate_ids(sentences, ids, gen, batch_size=size)
            report(f"batches of {size}", time.perf_counter() - start, len(sentences), totals)


if __name__ == "__main__":
    main()
