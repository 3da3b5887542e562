"""Training speed and memory, nmt-train against fairseq-train on the same data, taking turns.

Both tools train the fairseq reference shape of ../shared/tools/RESULTS.md (3+3 layers, d 256, FFN
1024, 4 heads, shared embeddings, dropout 0.1, Adam, inverse-sqrt, label smoothing 0.1,
``--max-tokens 4096``) on the CPU for ``--updates`` updates with ``--log-interval 10``, nothing saved,
no validation. Reported per run:

- *wps*: target tokens per second of training, from each tool's own log lines after the first
  interval (the first updates of a process are slower and are start-up, not speed), weighted by
  the interval's updates;
- *peak RSS*: the process tree's RSS sampled every 50 ms over the whole run.

nmt runs on nmt's import of fairseq's data-bin (``nmt-import-fairseq data``), so the batches are the same
sentences. Each ``--nmt`` variant is a name and extra nmt-train flags; the default compares fp32 and
``--bf16`` (bf16 is only faster on CPUs with avx512_bf16 or AMX):

    ../shared/tools/peer_fairseq.sh install && ../shared/tools/peer_fairseq.sh prep
    nmt-import-fairseq data --path ~/.cache/nmt-peer/data-bin/m30k --output /tmp/m30k-bin
    python benchmarks/train_vs_fairseq.py --nmt-data /tmp/m30k-bin [--repeats 2] [--updates 60]
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from measure_process import peak_tree_rss  # noqa: E402  (the benchmarks' one measuring helper)
from train_startup_vs_fairseq import DEFAULT_VENV, SHAPE

FAIRSEQ_DATA = Path.home() / ".cache" / "nmt-peer" / "data-bin" / "m30k"
WPS = re.compile(r"\bwps=([\d.]+)")
UPDATES = re.compile(r"num_updates=(\d+)")


def run_training(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wps after the first log interval, peak process-tree RSS in MB) of one training command."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    intervals: list[tuple[int, float]] = []  # (updates in the interval, wps)
    last, tail = 0, []
    assert proc.stdout is not None
    with peak_tree_rss(os.getpid()) as peak:
        for line in proc.stdout:
            tail = (tail + [line])[-20:]
            wps, updates = WPS.search(line), UPDATES.search(line)
            if wps and updates and "valid" not in line:
                n = int(updates.group(1))
                if last:  # the first interval holds the process's first updates
                    intervals.append((n - last, float(wps.group(1))))
                last = n
    if proc.wait() != 0 or not intervals:
        sys.exit(f"training failed or logged no interval: {' '.join(cmd)}\n{''.join(tail)}")
    total = sum(n for n, _ in intervals)
    return sum(n * w for n, w in intervals) / total, peak[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nmt-data", required=True, help="nmt-import-fairseq data's output for --fairseq-data")
    ap.add_argument("--fairseq-data", default=str(FAIRSEQ_DATA), help="peer_fairseq.sh prep's data-bin")
    ap.add_argument("--fairseq-venv", default=str(DEFAULT_VENV), help="peer_fairseq.sh install's venv")
    ap.add_argument("--updates", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--nmt", action="append", metavar="NAME=FLAGS",
                    help="an nmt variant: a name, '=', then environment KEY=VALUE words and nmt-train flags, e.g. "
                         "'bf16=--bf16' (repeatable; default fp32= and bf16=--bf16)")
    args = ap.parse_args()
    variants = dict(v.split("=", 1) for v in (args.nmt or ["fp32=", "bf16=--bf16"]))
    at = SHAPE.index("--log-interval")
    common = SHAPE[:at] + SHAPE[at + 2:] + ["--log-interval", "10", "--max-update", str(args.updates)]
    runs: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tools = {"fairseq": ([str(Path(args.fairseq_venv) / "bin" / "fairseq-train"), args.fairseq_data,
                              "--arch", "transformer", *common, "--cpu", "--log-format", "simple",
                              "--save-dir", f"{tmp}/fairseq", "--no-save", "--disable-validation"],
                             {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"})}
        for name, words in variants.items():
            env = dict(os.environ)  # leading KEY=VALUE words set environment variables
            flags = words.split()
            while flags and "=" in flags[0] and not flags[0].startswith("-"):
                key, value = flags.pop(0).split("=", 1)
                env[key] = value
            tools[f"nmt {name}"] = ([sys.executable, "-m", "nmt.cli.train", args.nmt_data, "--arch",
                                     "transformer_tiny", *common, *flags, "--save-dir", f"{tmp}/{name}",
                                     "--no-save", "--disable-validation", "--no-progress-bar"], env)
        for _ in range(args.repeats):  # taking turns: a noisy machine hits every tool alike
            for name, (cmd, env) in tools.items():
                wps, mb = run_training(cmd, env)
                runs.setdefault(name, []).append((wps, mb))
                print(f"{name:<14} {wps:8.0f} wps, peak RSS (process tree) {mb:6.0f} MB", flush=True)
    base = statistics.median(w for w, _ in runs["fairseq"])
    base_mb = max(m for _, m in runs["fairseq"])
    for name, rs in runs.items():
        wps, mb = statistics.median(w for w, _ in rs), max(m for _, m in rs)
        print(f"{name:<14} median {wps:8.0f} wps ({wps / base:4.2f}x fairseq), peak {mb:6.0f} MB "
              f"({mb / base_mb:4.2f}x fairseq)")


if __name__ == "__main__":
    main()
