"""Memory stays bounded by the dictionary, not the corpus: binarize a synthetic corpus of
2 million sentence pairs (Zipf-distributed words from a 50k vocabulary), print the peak RSS
of nmt-preprocess's largest process (goal < 500 MB) and of its process tree, and the time to
open the result (goal < 1 s).

    python -m benchmarks run preprocess_memory [--lines 2000000] [--workers 2]
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.measure_process import measure

VOCAB = 50_000


def write_synthetic(path: Path, lines: int, seed: int) -> None:
    """``lines`` sentences of 3-40 words, written in blocks so the generator's memory stays small."""
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(VOCAB)], dtype=object)
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, lines, 100_000):
            n = min(100_000, lines - start)
            lengths = rng.integers(3, 41, size=n)
            ids = np.minimum(rng.zipf(1.3, size=int(lengths.sum())) - 1, VOCAB - 1)
            toks = words[ids]
            cuts = np.cumsum(lengths)[:-1]
            f.write("\n".join(" ".join(s) for s in np.split(toks, cuts)) + "\n")


def main(argv: list[str]) -> str:
    ap = argparse.ArgumentParser(prog="preprocess_memory", description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tmp", default=None, help="folder for the corpus and output (default: system temp)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.tmp) as name:
        tmp = Path(name)
        t = time.perf_counter()
        for seed, lang in enumerate(("src", "tgt")):
            write_synthetic(tmp / f"train.{lang}", args.lines, seed)
        size_mb = sum(os.path.getsize(tmp / f"train.{lang}") for lang in ("src", "tgt")) / 2**20
        print(f"synthetic corpus: {args.lines:,} pairs, {size_mb:,.0f} MB of text "
              f"(written in {time.perf_counter() - t:.0f} s)")
        dest = tmp / "bin"
        got = measure([sys.executable, "-m", "nmt.cli.preprocess", "--source-lang", "src", "--target-lang", "tgt",
                       "--trainpref", str(tmp / "train"), "--destdir", str(dest), "--workers", str(args.workers)])
        wall, rss, cpu = got.wall_s, got.largest_mb, got.cpu_s  # rss: the largest process's peak
        print(f"nmt-preprocess --workers {args.workers}: wall {wall:.1f} s (CPU {cpu:.1f} s), "
              f"{2 * args.lines / wall:,.0f} lines/s, peak RSS {rss:.0f} MB (largest process; goal < 500 MB), "
              f"{got.tree_mb:.0f} MB (process tree)")
        opener = ("import sys, time; t0 = time.perf_counter()\n"
                  "from nmt.data.language_pair_dataset import load_language_pair\n"
                  "t1 = time.perf_counter()\n"
                  f"ds = load_language_pair({str(dest)!r}, 'train', 'src', 'tgt')\n"
                  "n = len(ds); x = ds.src[n // 2]; s = int(ds.src_sizes[-1])\n"
                  "t2 = time.perf_counter()\n"
                  # VmHWM, not ru_maxrss: Linux carries the parent's peak into ru_maxrss across exec
                  "rss = int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) / 1024\n"
                  "print(t1 - t0, t2 - t1, n, rss, 'torch' in sys.modules)")
        out = subprocess.run([sys.executable, "-c", opener], capture_output=True, text=True, check=True)
        imports, seconds, n, open_rss, torch = out.stdout.split()
        bin_mb = sum(p.stat().st_size for p in dest.iterdir()) / 2**20
        print(f"open the result ({int(n):,} sentences, {bin_mb:,.0f} MB on disk: dictionaries + memory maps) "
              f"and read one sentence: {float(seconds) * 1000:.0f} ms (goal < 1 s); "
              f"import of nmt.data before it: {float(imports) * 1000:.0f} ms; "
              f"process peak RSS {float(open_rss):.0f} MB; torch imported: {torch}")
    return (f"{args.lines:,} pairs: nmt-preprocess {wall:.1f} s, peak RSS {got.largest_mb:.0f} MB; open + read one "
            f"sentence {float(seconds) * 1000:.0f} ms, torch imported: {torch}")
