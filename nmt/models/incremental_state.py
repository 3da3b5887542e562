"""The decoder's cache while generating: one entry per attention module (its keys and values).

A plain dict so that search code can keep, copy or drop it freely; beam search reorders it
with :func:`reorder_incremental_state` when hypotheses are re-ranked.

An entry with a ``"length"`` keeps its keys/values in a buffer with room to grow
(``AttentionBase.cache_append``). Reordering one copies only the ``length`` filled positions, into
a new buffer with room for exactly one more step: beam search reorders after every step, so the
next step's keys fill the buffer and attention reads one contiguous tensor (a strided slice of a
larger buffer costs the matrix product a copy of its own).

Rows that started decoding at different times can share one cache (:func:`merge_incremental_states`,
used by searches that refill finished rows with new sentences): the growing entries are kept
right-aligned, so every row writes its next keys at the same index, and the ``LEFT_PADS`` entry
says how many leading positions of each row are not its own. The decoder reads it to mask those
positions and to give each row its own position numbers. Entries without a ``"length"`` hold the
projected encoder output (cross-attention): merged rows pad it on the right, like the source."""

from __future__ import annotations

from itertools import accumulate
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.models.attention import IncrementalState, KeyWindow

LEFT_PADS = "left_pads"  # entry {"pads": (B,) long}: leading cache positions each row does not own
# A step's self-attention is split in two (KeyWindow) only when that leaves out at least this many cached
# positions of all rows together and this share of them: the second call costs about ten more operators per
# layer (tens of microseconds), and a position left out saves reading its keys and values (a tenth of a
# microsecond for 4 heads of 64 in fp32).
WINDOW_MIN_SKIPPED = 1024
WINDOW_MIN_SHARE = 0.25


def new_incremental_state() -> IncrementalState:
    return {}


def left_pads(state: IncrementalState | None) -> Tensor | None:
    """(B,) leading cache positions that are not each row's own, or None when rows are aligned."""
    entry = state.get(LEFT_PADS) if state is not None else None
    return None if entry is None else entry["pads"]


def key_window(pads: Tensor, length: int) -> Optional[KeyWindow]:
    """Where to split a decoding step's rows so that each part's self-attention skips the leading cache
    positions none of its rows owns, given each row's ``pads`` (B,) and the cache's ``length``; None when
    that would not pay. Rows come in the order they joined the search (older rows first, owning more), so
    one split, chosen to skip the most, leaves out most of what a row-by-row window would."""
    p = pads.tolist()
    rows = len(p)
    if rows < 2:
        return None
    first = list(accumulate(p, min))  # first[i]: positions rows 0..i all leave out
    last = list(accumulate(reversed(p), min))[::-1]  # last[i]: positions rows i.. all leave out
    skipped, split = max((s * first[s - 1] + (rows - s) * last[s], s) for s in range(1, rows))
    if not skipped or skipped < max(WINDOW_MIN_SKIPPED, WINDOW_MIN_SHARE * rows * length):
        return None
    return KeyWindow(split, (first[split - 1], last[split]))


def reorder_incremental_state(state: IncrementalState, new_order: Tensor, drop_left: int = 0) -> None:
    """In place: row b of every cached tensor becomes old row ``new_order[b]`` (batch dim 0).
    ``drop_left``: also forget the first positions of the growing entries (no row owns them any more)."""
    for key, entry in state.items():
        state[key] = _reorder_entry(entry, new_order, drop_left)
    if drop_left and LEFT_PADS in state:
        state[LEFT_PADS] = {"pads": state[LEFT_PADS]["pads"] - drop_left}


def _reorder_entry(entry: dict[str, Any], order: Tensor, drop_left: int) -> dict[str, Any]:
    length = entry.get("length")
    if length is None:
        return {name: t.index_select(0, order) if isinstance(t, Tensor) else t for name, t in entry.items()}
    kept = length - drop_left
    out: dict[str, Any] = {"length": kept}
    for name in ("k", "v"):
        buf = entry[name]  # (B, H, capacity, D)
        B, H, _, D = buf.shape
        target = buf.new_empty((order.numel(), H, kept + 1, D))  # (B', H, kept + 1, D)
        torch.index_select(buf[:, :, drop_left:length], 0, order, out=target[:, :, :kept])
        out[name] = target
    return out


def merge_incremental_states(a: IncrementalState, b: IncrementalState, order: Tensor | None = None,
                             encoder_order: Tensor | None = None, drop_left: int = 0) -> IncrementalState:
    """One cache holding the rows of ``a`` then those of ``b``. Both must come from the same
    modules; growing entries are right-aligned (zeros before a row's own positions, which the
    decoder masks) and encoder-side entries are right-padded with zeros to the longer source.

    ``order`` takes ``a``'s rows in that order (a beam step's reorder, done in the same copy as the merge
    instead of a copy of its own), without their first ``drop_left`` positions; ``a``'s encoder-side rows then
    follow ``encoder_order`` (None: they stay as they are)."""
    rows_a, rows_b = _rows(a), _rows(b)
    lengths_a = {e["length"] for k, e in a.items() if k != LEFT_PADS and "length" in e}
    lengths_b = {e["length"] for k, e in b.items() if k != LEFT_PADS and "length" in e}
    if len(lengths_a) > 1 or len(lengths_b) > 1 or set(a) - {LEFT_PADS} != set(b) - {LEFT_PADS}:
        raise ValueError("merge_incremental_states: the caches come from different decoders or steps")
    end_a, len_b = (lengths_a or {0}).pop(), (lengths_b or {0}).pop()
    len_a = end_a - drop_left
    length = max(len_a, len_b)
    pads_a = _pads(a, rows_a)
    if order is not None:
        pads_a = pads_a.index_select(0, order)
    pads_a = pads_a - drop_left + (length - len_a)
    pads_b = _pads(b, rows_b) + (length - len_b)
    n_a = rows_a if order is None else order.numel()
    out: IncrementalState = {LEFT_PADS: {"pads": torch.cat([pads_a, pads_b])}}
    for key, ea in a.items():
        if key == LEFT_PADS:
            continue
        eb = b[key]
        if "length" in ea:
            merged: dict[str, Any] = {"length": length}
            for name in ("k", "v"):
                x, y = ea[name][:, :, drop_left:end_a], eb[name][:, :, :len_b]  # (B, H, len, D)
                _, H, _, D = x.shape
                buf = x.new_empty((n_a + y.size(0), H, length + 1, D))  # room for the next step
                if order is None:
                    buf[:n_a, :, length - len_a:length] = x
                else:
                    torch.index_select(x, 0, order, out=buf[:n_a, :, length - len_a:length])
                buf[n_a:, :, length - len_b:length] = y
                buf[:n_a, :, :length - len_a].zero_()  # positions no row of its part owns
                buf[n_a:, :, :length - len_b].zero_()
                merged[name] = buf
            out[key] = merged
        else:
            src = max(ea["k"].size(2), eb["k"].size(2))
            fixed = ea if encoder_order is None else _reorder_entry(ea, encoder_order, 0)
            out[key] = {name: torch.cat([_pad_time(fixed[name], src), _pad_time(eb[name], src)])
                        for name in ("k", "v")}
    return out


def _rows(state: IncrementalState) -> int:
    """Decoder rows: those of a growing entry (encoder-side ones may have one row per sentence)."""
    for key, entry in state.items():
        if key != LEFT_PADS and "length" in entry:
            return entry["k"].size(0)
    raise ValueError("merge_incremental_states: no decoder-side cache (decode one step before merging)")


def _pads(state: IncrementalState, rows: int) -> Tensor:
    pads = left_pads(state)
    if pads is not None:
        return pads
    device = next(e["k"].device for k, e in state.items() if k != LEFT_PADS and "length" in e)
    return torch.zeros(rows, dtype=torch.long, device=device)


def _pad_time(x: Tensor, length: int) -> Tensor:
    """(B, H, S, D) right-padded with zeros to S = ``length``."""
    return x if x.size(2) == length else F.pad(x, (0, 0, 0, length - x.size(2)))
