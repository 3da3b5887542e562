"""Token-based batching: cut a corpus into batches of about ``--max-tokens`` padded tokens, from the
sentence lengths alone (the ``.idx`` sizes), without reading any token data.

A sentence's size is ``max(source length, target length)`` (eos included) and a batch costs
``n_sentences * its longest size``, which bounds both padded tensors. Sentences are sorted by
(size, target length, source length) -- a seeded random key breaks ties so that equal-length
sentences are not grouped in corpus order -- and packed greedily in that order, so every batch
holds sentences of nearly the same length and padding stays small. Batches are built once; the
epoch iterator (``nmt.data.epoch_iterator``) reshuffles their order every epoch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from nmt.data.epoch_iterator import EpochBatchIterator  # noqa: F401  (re-exported: the contract names this module)
from nmt.errors import ConfigError, DataError

logger = logging.getLogger(__name__)


@dataclass
class BatchPlan:
    """The batches of one split and how many sentences were left out for being too long."""

    batches: list[np.ndarray]  # each an int64 array of dataset indices
    num_skipped: int
    num_sentences: int  # sentences in the batches


def sentence_sizes(src_sizes: np.ndarray, tgt_sizes: np.ndarray | None) -> np.ndarray:
    """Per-sentence cost in a batch: the longer of source and target."""
    src = np.asarray(src_sizes, dtype=np.int64)
    if tgt_sizes is None:
        return src
    return np.maximum(src, np.asarray(tgt_sizes, dtype=np.int64))


def filter_by_size(src_sizes: np.ndarray, tgt_sizes: np.ndarray | None, *, max_source_positions: int | None,
                   max_target_positions: int | None, max_tokens: int | None = None, skip_invalid: bool = False,
                   split: str = "data") -> tuple[np.ndarray, int]:
    """(indices of the sentences that fit, how many were skipped).

    A sentence longer than ``--max-source-positions`` / ``--max-target-positions``, or bigger than
    ``--max-tokens`` on its own, is skipped when ``skip_invalid`` and otherwise refused with an
    error naming the first such sentence (as fairseq does)."""
    src = np.asarray(src_sizes, dtype=np.int64)
    bad = np.zeros(len(src), dtype=bool)
    if max_source_positions:
        bad |= src > max_source_positions
    if tgt_sizes is not None and max_target_positions:
        bad |= np.asarray(tgt_sizes, dtype=np.int64) > max_target_positions
    if max_tokens:
        bad |= sentence_sizes(src, tgt_sizes) > max_tokens
    num_bad = int(bad.sum())
    if num_bad and not skip_invalid:
        i = int(np.flatnonzero(bad)[0])
        tgt_len = None if tgt_sizes is None else int(tgt_sizes[i])
        checks = [(int(src[i]), max_source_positions, "source length", "--max-source-positions"),
                  (tgt_len, max_target_positions, "target length", "--max-target-positions"),
                  (max(int(src[i]), tgt_len or 0), max_tokens, "size", "--max-tokens")]
        why = "; ".join(f"{what} {n} > {flag} {limit}" for n, limit, what, flag in checks
                        if n is not None and limit and n > limit)
        raise DataError(f"{split}: sentence {i} is too long ({why}; {num_bad} of {len(src)} sentences are); "
                        "raise the limit or pass --skip-invalid-size-inputs-valid-test to skip them")
    if num_bad:
        logger.warning("%s: skipped %d sentences longer than the size limits", split, num_bad)
    return np.flatnonzero(~bad).astype(np.int64), num_bad


def length_order(src_sizes: np.ndarray, tgt_sizes: np.ndarray | None, indices: np.ndarray,
                 seed: int | None = None) -> np.ndarray:
    """``indices`` sorted by (size, target length, source length); ties in a seeded random order.

    After a seeded shuffle, three stable sorts, least significant key first: on lengths below 2**16
    numpy's stable sort of uint16 keys is a radix sort, linear in the number of sentences (about
    twice as fast as one stable sort of a folded int64 key on 5M sentences, which remains the path
    for longer lengths)."""
    if seed is not None:
        indices = indices[np.random.default_rng(seed).permutation(len(indices))]
    if not len(indices):
        return indices
    src = np.asarray(src_sizes)[indices]
    tgt = src if tgt_sizes is None else np.asarray(tgt_sizes)[indices]
    size = np.maximum(src, tgt)
    if int(size.max()) < 2**16:
        order = np.argsort(src.astype(np.uint16), kind="stable")
        if tgt_sizes is not None:
            order = order[np.argsort(tgt[order].astype(np.uint16), kind="stable")]
            order = order[np.argsort(size[order].astype(np.uint16), kind="stable")]
        return indices[order]
    src, tgt, size = (a.astype(np.int64) for a in (src, tgt, size))
    src_span, tgt_span = int(src.max()) + 1, int(tgt.max()) + 1
    if int(size.max()) + 1 > (2**62) // (src_span * tgt_span):  # absurd lengths: the key would overflow
        return indices[np.lexsort([src, tgt, size])]
    key = (size * tgt_span + tgt) * src_span + src  # (N,) orders like (size, tgt, src)
    return indices[np.argsort(key, kind="stable")]


def pack_sorted(sizes: np.ndarray, max_tokens: int | None, max_sentences: int | None = None,
                multiple: int = 1) -> np.ndarray:
    """Batch boundaries for sizes sorted in non-decreasing order: the start offset of every batch
    plus ``len(sizes)`` at the end.

    Greedy: each batch takes as many sentences as fit ``count * largest <= max_tokens`` and
    ``count <= max_sentences``; a batch that was cut short is rounded down to a multiple of
    ``multiple`` (when it holds at least that many), leaving the rest for the next batch. The loop
    runs once per batch, not per sentence, with a binary search of the batch's length inside."""
    n = len(sizes)
    if max_tokens is None and max_sentences is None:
        raise ConfigError("batching needs --max-tokens or --batch-size (or both)")
    multiple = max(1, int(multiple))
    cap_sent = int(max_sentences) if max_sentences else n
    size = sizes.tolist()  # Python ints: indexing a list is ~10x faster than a numpy array
    bounds = [0]
    start = 0
    while start < n:
        hi = min(cap_sent, n - start)
        if max_tokens is not None:
            # count * size[start + count - 1] grows with count: binary-search the largest that fits.
            # Every size from ``start`` on is >= size[start], which bounds the search.
            hi = max(1, min(hi, max_tokens // max(size[start], 1)))
            lo = 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if mid * size[start + mid - 1] <= max_tokens:
                    lo = mid
                else:
                    hi = mid - 1
        count = hi
        if start + count < n and count >= multiple:
            count -= count % multiple
        start += count
        bounds.append(start)
    return np.asarray(bounds, dtype=np.int64)


def batch_by_size(src_sizes: np.ndarray, tgt_sizes: np.ndarray | None, *, max_tokens: int | None,
                  max_sentences: int | None = None, required_batch_size_multiple: int = 1,
                  max_source_positions: int | None = None, max_target_positions: int | None = None,
                  skip_invalid: bool = False, seed: int | None = 1, split: str = "data") -> BatchPlan:
    """The batches of a split, from its sentence lengths (``tgt_sizes`` may be None for source-only data).

    Every kept sentence is in exactly one batch; a batch costs at most ``max_tokens`` padded tokens
    and holds at most ``max_sentences`` sentences."""
    if max_tokens is not None and max_tokens <= 0:
        raise ConfigError(f"--max-tokens {max_tokens}: must be a positive number of tokens")
    if max_sentences is not None and max_sentences <= 0:
        raise ConfigError(f"--batch-size {max_sentences}: must be a positive number of sentences")
    indices, num_skipped = filter_by_size(
        src_sizes, tgt_sizes, max_source_positions=max_source_positions,
        max_target_positions=max_target_positions, max_tokens=max_tokens, skip_invalid=skip_invalid, split=split)
    ordered = length_order(src_sizes, tgt_sizes, indices, seed)
    sizes = sentence_sizes(src_sizes, tgt_sizes)[ordered]
    batches = split_sorted(ordered, sizes, max_tokens, max_sentences, required_batch_size_multiple)
    return BatchPlan(batches=batches, num_skipped=num_skipped, num_sentences=len(ordered))


def split_sorted(ordered: np.ndarray, sizes: np.ndarray, max_tokens: int | None, max_sentences: int | None = None,
                 multiple: int = 1) -> list[np.ndarray]:
    """``ordered`` (indices whose ``sizes`` do not decrease) cut into batches by ``pack_sorted``."""
    bounds = pack_sorted(sizes, max_tokens, max_sentences, multiple)
    return np.split(ordered, bounds[1:-1]) if len(ordered) else []

