"""Time token-based batching on synthetic WMT-sized sizes (4.5M sentences) and on Multi30k's
real lengths; print seconds, batch counts and padding efficiency (real tokens / padded cost)."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import numpy as np

from nmt.data.batching import batch_by_size

MULTI30K = str(Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k")  # ../shared beside the checkout


def report(name: str, src: np.ndarray, tgt: np.ndarray, max_tokens: int) -> None:
    t0 = time.perf_counter()
    plan = batch_by_size(src, tgt, max_tokens=max_tokens, required_batch_size_multiple=8,
                         max_source_positions=1024, max_target_positions=1024, skip_invalid=True)
    seconds = time.perf_counter() - t0
    size = np.maximum(src, tgt)
    cost = sum(len(b) * int(size[b].max()) for b in plan.batches)
    src_pad = sum(len(b) * int(src[b].max()) for b in plan.batches)
    tgt_pad = sum(len(b) * int(tgt[b].max()) for b in plan.batches)
    print(f"{name}: {len(src):,} sentences -> {len(plan.batches):,} batches of <= {max_tokens} tokens "
          f"in {seconds:.2f} s; efficiency max(src,tgt) {size[np.concatenate(plan.batches)].sum() / cost:.3f}, "
          f"source tensor {src.sum() / src_pad:.3f}, target tensor {tgt.sum() / tgt_pad:.3f}")


def main() -> None:
    rng = np.random.default_rng(0)
    n = 4_500_000
    src = np.clip(rng.lognormal(3.2, 0.6, n).astype(np.int64), 1, 1500)
    tgt = np.clip((src * rng.normal(1.05, 0.15, n)).astype(np.int64), 1, 1500)
    report("synthetic WMT-like", src, tgt, 4096)

    def lengths(path: str) -> np.ndarray:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return np.array([len(line.split()) + 1 for line in f])

    try:
        report("multi30k en-de (words+eos)", lengths(f"{MULTI30K}/train.en.gz"), lengths(f"{MULTI30K}/train.de.gz"),
               4096)
    except FileNotFoundError:
        print("multi30k not found; skipped")


if __name__ == "__main__":
    main()
