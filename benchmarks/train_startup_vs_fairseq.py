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

A third runner, *floor* (``startup_floor.py``), takes its turn beside them: a stock ``torch.nn.Transformer``
of the same shape with ``torch.optim.Adam`` and a random batch of 4,096 tokens, no data-bin at all. It is
what any PyTorch trainer pays before its first update on this machine, so a goal below it cannot be met.

The data-bins come from ``preprocess_vs_fairseq.py`` (``WORK/nmt-bin`` and ``WORK/fairseq-bin``):

    python benchmarks/train_startup_vs_fairseq.py --work /tmp/pp5m [--repeats 2]
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
from pathlib import Path

from measure_process import peak_tree_rss  # noqa: E402  (the benchmarks' one measuring helper)

DEFAULT_VENV = Path.home() / ".cache" / "nmt-peer" / "fairseq-venv"
SHAPE = ["--encoder-layers", "3", "--decoder-layers", "3", "--encoder-embed-dim", "256", "--decoder-embed-dim", "256",
         "--encoder-ffn-embed-dim", "1024", "--decoder-ffn-embed-dim", "1024", "--encoder-attention-heads", "4",
         "--decoder-attention-heads", "4", "--share-all-embeddings", "--optimizer", "adam", "--adam-betas",
         "(0.9,0.98)", "--lr", "5e-4", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4000",
         "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--max-tokens", "4096",
         "--dropout", "0.1", "--seed", "1", "--log-interval", "1"]
READY = {"nmt": "batches per epoch per rank", "fairseq": "Start iterating over samples",
         "floor": "startup_floor: built"}
FIRST_UPDATE = "num_updates=1,"


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
        sys.exit(f"no ready line or first update from: {' '.join(cmd)}\n{''.join(tail)}")
    return ready, seconds, peak[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True, help="preprocess_vs_fairseq.py's --work (nmt-bin/, fairseq-bin/)")
    ap.add_argument("--fairseq-venv", default=str(DEFAULT_VENV), help="peer_fairseq.sh install's venv")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    work, venv = Path(args.work), Path(args.fairseq_venv)
    runs: dict[str, list[tuple[float, float, float]]] = {"nmt": [], "fairseq": [], "floor": []}
    with tempfile.TemporaryDirectory() as tmp:
        tools = {
            "nmt": ([sys.executable, "-m", "nmt.cli.train", str(work / "nmt-bin"), "--arch", "transformer_tiny",
                     *SHAPE, "--save-dir", f"{tmp}/nmt", "--no-save", "--no-progress-bar"], dict(os.environ)),
            "fairseq": ([str(venv / "bin" / "fairseq-train"), str(work / "fairseq-bin"), "--arch", "transformer",
                         *SHAPE, "--cpu", "--log-format", "simple", "--save-dir", f"{tmp}/fairseq", "--no-save",
                         "--disable-validation"], {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}),
            "floor": ([sys.executable, str(Path(__file__).with_name("startup_floor.py"))], dict(os.environ)),
        }
        for _ in range(args.repeats):  # taking turns: a noisy machine hits every runner alike
            for name, (cmd, env) in tools.items():
                ready, first, mb = until_first_update(cmd, env, READY[name])
                runs[name].append((ready, first, mb))
                print(f"{name:<8} launch -> ready {ready:6.1f} s, -> first update {first:6.1f} s, "
                      f"peak RSS (process tree) {mb:6.0f} MB", flush=True)
    med = {name: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs), max(r[2] for r in rs))
           for name, rs in runs.items()}
    for name, (ready, first, mb) in med.items():
        print(f"{name:<8} median: ready {ready:6.1f} s, first update {first:6.1f} s; peak {mb:6.0f} MB")
    (nr, nf, nm), (fr, ff, fm), (lr, lf, _) = med["nmt"], med["fairseq"], med["floor"]
    print(f"nmt / fairseq: ready {nr / fr:.2f}x, first update {nf / ff:.2f}x (goal <= 0.33), "
          f"peak memory {nm / fm:.2f}x (goal <= 1)")
    print(f"floor / fairseq's first update: built {lr / ff:.2f}x (Python, import torch, the model, torch.optim.Adam), "
          f"first update {lf / ff:.2f}x (a stock torch.nn.Transformer, no data)")


if __name__ == "__main__":
    main()
