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
``--bf16`` (bf16 is only faster on CPUs with avx512_bf16 or AMX). fairseq takes its turn when its venv and its
data-bin are found (else only nmt runs); they come from:

    ../shared/tools/peer_fairseq.sh install && ../shared/tools/peer_fairseq.sh prep
    nmt-import-fairseq data --path ~/.cache/nmt-peer/data-bin/m30k --output /tmp/m30k-bin
    python -m benchmarks run train_vs_fairseq --nmt-data /tmp/m30k-bin [--repeats 2] [--updates 60]
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

from benchmarks import add_fairseq_venv_argument, data_bin, existing, fairseq_env, fairseq_venv
from benchmarks.measure_process import peak_tree_rss
from benchmarks.train_startup_vs_fairseq import add_shape_arguments, reference_shape
from nmt.errors import NmtError

FAIRSEQ_DATA = Path.home() / ".cache" / "nmt-peer" / "data-bin" / "m30k"
WPS = re.compile(r"\bwps=([\d.]+)")
UPDATES = re.compile(r"num_updates=(\d+)")


def run_training(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wps after the first log interval, peak process-tree RSS in MB) of one training command."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    intervals: list[tuple[int, float]] = []  # (updates in the interval, wps)
    last, tail = 0, list[str]()
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
        print("".join(tail), file=sys.stderr)
        raise NmtError(f"training failed or logged no interval after the first: {' '.join(cmd[:3])} ...: "
                       f"{(tail or ['(no output)'])[-1].strip()}")
    total = sum(n for n, _ in intervals)
    return sum(n * w for n, w in intervals) / total, peak[0]


def main(argv: list[str]) -> str:
    ap = argparse.ArgumentParser(prog="train_vs_fairseq", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nmt-data", required=True, help="nmt-import-fairseq data's output for --fairseq-data (any "
                    "nmt data-bin when fairseq does not run)")
    ap.add_argument("--fairseq-data", help="fairseq's data-bin [default: ~/.cache/nmt-peer/data-bin/m30k, "
                    "peer_fairseq.sh prep's, when it is there]")
    add_fairseq_venv_argument(ap)
    ap.add_argument("--updates", type=int, default=60)
    ap.add_argument("--log-interval", type=int, default=10, help="updates per logged wps (the first interval is "
                    "start-up, not counted)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--nmt", action="append", metavar="NAME=FLAGS",
                    help="an nmt variant: a name, '=', then environment KEY=VALUE words and nmt-train flags, e.g. "
                         "'bf16=--bf16' (repeatable; default fp32= and bf16=--bf16)")
    add_shape_arguments(ap)
    args = ap.parse_args(argv)
    nmt_data = data_bin(args.nmt_data, "--nmt-data")
    venv = fairseq_venv(args.fairseq_venv)
    fairseq_data = args.fairseq_data or (str(FAIRSEQ_DATA) if FAIRSEQ_DATA.is_dir() else None)
    variants = dict(v.split("=", 1) for v in (args.nmt or ["fp32=", "bf16=--bf16"]))
    common = reference_shape(args.layers, args.dim, args.log_interval) + ["--max-update", str(args.updates)]
    runs: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tools: dict[str, tuple[list[str], dict[str, str]]] = {}
        if venv is None or fairseq_data is None:
            print("fairseq: skipped (give --fairseq-venv and --fairseq-data: fairseq 0.12's venv and its data-bin)",
                  flush=True)
        else:
            tools["fairseq"] = ([str(venv / "bin" / "fairseq-train"),
                                 str(existing(fairseq_data, "--fairseq-data", "peer_fairseq.sh prep writes it")),
                                 "--arch", "transformer", *common, "--cpu", "--log-format", "simple",
                                 "--save-dir", f"{tmp}/fairseq", "--no-save", "--disable-validation"],
                                fairseq_env())
        for name, words in variants.items():
            env = dict(os.environ)  # leading KEY=VALUE words set environment variables
            flags = words.split()
            while flags and "=" in flags[0] and not flags[0].startswith("-"):
                key, value = flags.pop(0).split("=", 1)
                env[key] = value
            tools[f"nmt {name}"] = ([sys.executable, "-m", "nmt.cli.train", str(nmt_data), "--arch",
                                     "transformer_tiny", *common, *flags, "--save-dir", f"{tmp}/{name}",
                                     "--no-save", "--disable-validation", "--no-progress-bar"], env)
        for _ in range(args.repeats):  # taking turns: a noisy machine hits every tool alike
            for name, (cmd, env) in tools.items():
                wps, mb = run_training(cmd, env)
                runs.setdefault(name, []).append((wps, mb))
                print(f"{name:<14} {wps:8.0f} wps, peak RSS (process tree) {mb:6.0f} MB", flush=True)
    figures = []
    base = statistics.median(w for w, _ in runs["fairseq"]) if "fairseq" in runs else None
    base_mb = max(m for _, m in runs["fairseq"]) if "fairseq" in runs else None
    for name, rs in runs.items():
        wps, mb = statistics.median(w for w, _ in rs), max(m for _, m in rs)
        against = f" ({wps / base:4.2f}x fairseq), " if base else ", "
        print(f"{name:<14} median {wps:8.0f} wps{against}peak {mb:6.0f} MB"
              + (f" ({mb / base_mb:4.2f}x fairseq)" if base_mb else ""))
        figures.append(f"{name} {wps:,.0f} wps{against.rstrip(', ')}, {mb:,.0f} MB")
    return "; ".join(figures)
