"""How fast nmt-preprocess binarizes Multi30k en-de, against fairseq-preprocess's 5.9 s / 343 MB.

1. The full pipeline (Moses + joint BPE 10k + joined dictionary, --workers 2) on the raw text; it
   also keeps the BPE text it produced (--keep-text).
2. Binarization only: that BPE text with --tokenizer space --bpe none --joined-dictionary
   --workers 2 -- the same job the fairseq reference timed.

Each run is a fresh process (import time included), measured by wall clock and the peak RSS of
the process tree (the largest single process, as /usr/bin/time -v reports it). Figures are
printed; the binarize-only run is repeated (median shown) since a shared machine is noisy.

    python benchmarks/preprocess_speed.py [--data ../shared/data/multi30k] [--repeats 3]
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import measure_process  # noqa: E402  (the benchmarks' one measuring helper)

FAIRSEQ_WALL_S, FAIRSEQ_RSS_MB = 5.9, 343.0


def measure(cmd: list[str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MB of the largest process, CPU seconds of the process tree) of ``cmd``.
    CPU seconds are the steadier figure when other jobs share the machine."""
    got = measure_process.measure(cmd)
    return got.wall_s, got.largest_mb, got.cpu_s


def preprocess_cmd(pref: dict[str, Path], dest: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "nmt.cli.preprocess", "--source-lang", "en", "--target-lang", "de",
            "--trainpref", str(pref["train"]), "--validpref", str(pref["valid"]), "--testpref", str(pref["test"]),
            "--destdir", str(dest), "--joined-dictionary", "--workers", "2", *extra]


def report(name: str, runs: list[tuple[float, float, float]], lines: int) -> None:
    wall = statistics.median(r[0] for r in runs)
    rss = max(r[1] for r in runs)
    cpu = statistics.median(r[2] for r in runs)
    print(f"{name:<34} wall {wall:6.2f} s (runs: {', '.join(f'{r[0]:.2f}' for r in runs)}), CPU {cpu:6.2f} s  "
          f"{lines / wall:>9,.0f} lines/s  peak RSS {rss:6.1f} MB  "
          f"vs fairseq: {FAIRSEQ_WALL_S / wall:4.1f}x faster, {rss / FAIRSEQ_RSS_MB:4.2f}x memory")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"))
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    data = Path(args.data)
    raw = {"train": data / "train", "valid": data / "val", "test": data / "test_2016_flickr"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        full = [measure(preprocess_cmd(raw, tmp / "full0", "--tokenizer", "moses", "--bpe", "subword_nmt",
                                       "--bpe-merges", "10000", "--keep-text"))]  # slow: once
        meta = json.loads((tmp / "full0" / "metadata.json").read_text())
        lines = sum(s[lang]["sentences"] for s in meta["splits"].values() for lang in meta["langs"])
        bpe = {split: tmp / "full0" / "text" / split for split in raw}
        binarize = [measure(preprocess_cmd(bpe, tmp / f"bin{k}")) for k in range(args.repeats)]
        same = all((tmp / "bin0" / f).read_bytes() == (tmp / "full0" / f).read_bytes()
                   for f in ("dict.en.txt", "train.en-de.en.bin", "train.en-de.de.idx"))
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import nmt.cli.preprocess"], check=True)
        startup = time.perf_counter() - start
    print(f"Multi30k en-de, {lines:,} lines (train+valid+test, both sides), --workers 2, {args.repeats} binarize runs")
    report("binarize only (BPE text given)", binarize, lines)
    report("tokenize + BPE + binarize", full, lines)
    print(f"python startup + import of nmt.cli.preprocess: {startup:.2f} s; "
          f"binarize-only output identical to the full run's: {same}")


if __name__ == "__main__":
    main()
