"""Training start-up at scale: time from launch to the first update, and peak memory until then,
nmt-train against fairseq-train on the same BPE text (each tool's own data-bin of it).

Start-up is what a user waits through before the first update: imports, opening the data-bin,
reading every sentence length, filtering by length, building the token-based batches, building the
model. On a 5M-pair corpus the batching is the part that grows with the data. Both tools run the
fairseq reference shape (3+3 layers, d 256, FFN 1024, 4 heads, shared embeddings, Adam, inverse-sqrt,
label smoothing, ``--max-tokens 4096``, fp32 on the CPU) with ``--log-interval 1``. Two times are
taken from the log lines as they arrive:

- *ready*: everything is built and the first batch is about to run (fairseq's "Start iterating over
  samples", nmt's "... batches per epoch per rank" line): the start-up proper;
- *first update*: the first ``num_updates=1`` line, i.e. ready plus one forward, backward and
  optimizer step (the first of a process is slower than the next ones);

then the process is stopped. Peak memory is the process tree's RSS sampled every 50 ms until then.
fairseq takes its turn when its venv (``--fairseq-venv``) and its data-bin of the same text (``--fairseq-data``)
are given; else only nmt-train runs.

The data-bins come from ``preprocess_vs_fairseq --work W`` (W/nmt-bin and W/fairseq-bin):

    python -m benchmarks run make_large_corpus --pairs 5000000 --out /tmp/c5m
    python -m benchmarks run preprocess_vs_fairseq --corpus /tmp/c5m --work /tmp/pp5m
    python -m benchmarks run train_startup_vs_fairseq --nmt-data /tmp/pp5m/nmt-bin \\
        --fairseq-data /tmp/pp5m/fairseq-bin [--repeats 2]
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import add_fairseq_venv_argument, data_bin, existing, fairseq_env, fairseq_venv
from benchmarks.measure_process import peak_tree_rss
from nmt.errors import NmtError

READY = {"nmt": "batches per epoch per rank", "fairseq": "Start iterating over samples"}
FIRST_UPDATE = "num_updates=1,"


def reference_shape(layers: int = 3, dim: int = 256, log_interval: int = 1) -> list[str]:
    """The fairseq reference training's flags, which both nmt-train and fairseq-train take: ``layers`` per side of
    width ``dim`` (3 and 256 in the reference; smaller for a quick check), FFN 4 x dim, 4 heads."""
    return ["--encoder-layers", str(layers), "--decoder-layers", str(layers), "--encoder-embed-dim", str(dim),
            "--decoder-embed-dim", str(dim), "--encoder-ffn-embed-dim", str(4 * dim), "--decoder-ffn-embed-dim",
            str(4 * dim), "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--share-all-embeddings",
            "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "5e-4", "--lr-scheduler", "inverse_sqrt",
            "--warmup-updates", "4000", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
            "--max-tokens", "4096", "--dropout", "0.1", "--seed", "1", "--log-interval", str(log_interval)]


def add_shape_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--layers", type=int, default=3, help="layers per side (3: the reference shape)")
    ap.add_argument("--dim", type=int, default=256, help="model width, FFN 4x (256: the reference shape)")


def until_first_update(cmd: list[str], env: dict[str, str], ready_mark: str) -> tuple[float, float, float]:
    """(seconds from launch to ready, to the first update's log line, peak process-tree RSS in MB until then)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    tail: list[str] = []
    seconds = ready = None
    assert proc.stdout is not None
    with peak_tree_rss(os.getpid()) as peak:
        for line in proc.stdout:
            tail = (tail + [line])[-20:]
            if ready is None and ready_mark in line:
                ready = time.perf_counter() - start
            if FIRST_UPDATE in line:
                seconds = time.perf_counter() - start
                break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if seconds is None or ready is None:
        print("".join(tail), file=sys.stderr)
        raise NmtError(f"no ready line or first update from {' '.join(cmd[:3])} ...: {(tail or ['(no output)'])[-1]}")
    return ready, seconds, peak[0]


def main(argv: list[str]) -> str:
    ap = argparse.ArgumentParser(prog="train_startup_vs_fairseq", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nmt-data", required=True, help="nmt's data-bin (preprocess_vs_fairseq's W/nmt-bin)")
    ap.add_argument("--fairseq-data", help="fairseq's data-bin of the same text (preprocess_vs_fairseq's "
                    "W/fairseq-bin); without it, only nmt-train runs")
    add_fairseq_venv_argument(ap)
    ap.add_argument("--repeats", type=int, default=2)
    add_shape_arguments(ap)
    args = ap.parse_args(argv)
    nmt_data = data_bin(args.nmt_data, "--nmt-data")
    venv = fairseq_venv(args.fairseq_venv)
    shape = reference_shape(args.layers, args.dim)
    runs: dict[str, list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tools = {"nmt": ([sys.executable, "-m", "nmt.cli.train", str(nmt_data), "--arch", "transformer_tiny", *shape,
                          "--save-dir", f"{tmp}/nmt", "--no-save", "--disable-validation", "--no-progress-bar"],
                         dict(os.environ))}
        if venv is None or args.fairseq_data is None:
            print("fairseq: skipped (give --fairseq-venv and --fairseq-data: fairseq 0.12's venv and its data-bin of "
                  "the same text)", flush=True)
        else:
            fairseq_data = existing(args.fairseq_data, "--fairseq-data", "preprocess_vs_fairseq --work W writes "
                                    "W/fairseq-bin")
            tools["fairseq"] = ([str(venv / "bin" / "fairseq-train"), str(fairseq_data), "--arch", "transformer",
                                 *shape, "--cpu", "--log-format", "simple", "--save-dir", f"{tmp}/fairseq",
                                 "--no-save", "--disable-validation"],
                                fairseq_env())
        for _ in range(args.repeats):  # taking turns: a noisy machine hits every runner alike
            for name, (cmd, env) in tools.items():
                ready, first, mb = until_first_update(cmd, env, READY[name])
                runs.setdefault(name, []).append((ready, first, mb))
                print(f"{name:<8} launch -> ready {ready:6.1f} s, -> first update {first:6.1f} s, "
                      f"peak RSS (process tree) {mb:6.0f} MB", flush=True)
    med = {name: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs), max(r[2] for r in rs))
           for name, rs in runs.items()}
    for name, (ready, first, mb) in med.items():
        print(f"{name:<8} median: ready {ready:6.1f} s, first update {first:6.1f} s; peak {mb:6.0f} MB")
    figures = [f"{name} ready {ready:.1f} s, first update {first:.1f} s, {mb:,.0f} MB"
               for name, (ready, first, mb) in med.items()]
    if "fairseq" in med:
        (nr, nf, nm), (fr, ff, fm) = med["nmt"], med["fairseq"]
        print(f"nmt / fairseq: ready {nr / fr:.2f}x, first update {nf / ff:.2f}x (goal <= 0.33), "
              f"peak memory {nm / fm:.2f}x (goal <= 1)")
        figures.append(f"nmt / fairseq first update {nf / ff:.2f}x, memory {nm / fm:.2f}x")
    return "; ".join(figures)
