"""Two data-bins of millions of pairs in seconds, for timing start-up: a fairseq data-bin and nmt's import of it
(``nmt-import-fairseq``'s ``data-bin``), their training split repeated ``--times`` times, written as
``WORK/nmt-bin`` and ``WORK/fairseq-bin`` for ``train_startup_vs_fairseq.py``.

Both hold the same text (the fairseq one's), so the two tools read the same sentences; the lengths are the small
corpus's, repeated. ``make_large_corpus.py`` + ``preprocess_vs_fairseq.py`` make a corpus of varied lines instead,
in about 75 minutes. The fairseq side is written by fairseq's own ``.idx`` writer, run in the fairseq venv.

    python benchmarks/repeat_data_bins.py --fairseq-bin ~/.cache/nmt-peer/data-bin/m30k --nmt-bin /tmp/m30k-bin \\
        --times 173 --work /tmp/rep5m
    python benchmarks/train_startup_vs_fairseq.py --work /tmp/rep5m --repeats 3
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np

from nmt.data.indexed_dataset import IndexedDataset, ShardWriter, write_index

DEFAULT_VENV = Path.home() / ".cache" / "nmt-peer" / "fairseq-venv"
PAIR = "train.{src}-{tgt}.{lang}"

FAIRSEQ_REPEAT = """
import sys
import numpy as np
from fairseq.data.indexed_dataset import MMapIndexedDataset
source, out, times = sys.argv[1], sys.argv[2], int(sys.argv[3])
ds = MMapIndexedDataset(source)
with open(source + ".bin", "rb") as f:
    data = f.read()
with open(out + ".bin", "wb") as f:
    for _ in range(times):
        f.write(data)
with MMapIndexedDataset.Index.writer(out + ".idx", ds._index.dtype) as w:
    w.write(np.tile(ds.sizes.astype(np.int32), times).tolist())
assert len(MMapIndexedDataset(out)) == len(ds) * times
"""


def repeat_nmt(source: Path, out: Path, times: int) -> int:
    """``out`` (.bin/.idx): the sentences of ``source`` ``times`` times over; returns the sentence count."""
    ds = IndexedDataset(source)
    writer = ShardWriter(out, ds.dtype)
    for _ in range(times):
        writer.add_block(np.asarray(ds.tokens), np.asarray(ds.sizes))
    writer.close()
    write_index(f"{out}.sizes", out, ds.dtype)
    Path(f"{out}.sizes").unlink()
    return len(ds) * times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fairseq-bin", required=True, help="a fairseq data-bin (e.g. the peer's Multi30k one)")
    ap.add_argument("--nmt-bin", required=True, help="nmt's import of that data-bin (nmt-import-fairseq)")
    ap.add_argument("--times", type=int, default=173, help="copies of the training split [173: 5,017,000 pairs "
                    "of Multi30k]")
    ap.add_argument("--work", required=True, help="writes WORK/nmt-bin and WORK/fairseq-bin")
    ap.add_argument("--fairseq-venv", default=str(DEFAULT_VENV))
    args = ap.parse_args()
    work, fairseq_bin, nmt_bin = Path(args.work), Path(args.fairseq_bin), Path(args.nmt_bin)
    meta = json.loads((nmt_bin / "metadata.json").read_text())
    src, tgt = meta["source_lang"], meta["target_lang"]
    for name, source in (("nmt-bin", nmt_bin), ("fairseq-bin", fairseq_bin)):
        shutil.rmtree(work / name, ignore_errors=True)
        shutil.copytree(source, work / name, ignore=shutil.ignore_patterns("train.*"))
    python = Path(args.fairseq_venv) / "bin" / "python"
    for lang in (src, tgt):
        split = PAIR.format(src=src, tgt=tgt, lang=lang)
        count = repeat_nmt(nmt_bin / split, work / "nmt-bin" / split, args.times)
        train = meta["splits"]["train"][lang]
        for key in ("sentences", "tokens", "words", "unk", "empty_lines"):
            if key in train:
                train[key] *= args.times
        subprocess.run([str(python), "-c", FAIRSEQ_REPEAT, str(fairseq_bin / split), str(work / "fairseq-bin" / split),
                        str(args.times)], check=True)
        print(f"{split}: {count:,} sentences in {work / 'nmt-bin'} and {work / 'fairseq-bin'}")
    (work / "nmt-bin" / "metadata.json").write_text(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
