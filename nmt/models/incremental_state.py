"""The decoder's cache while generating: one entry per attention module (its keys and values).

A plain dict so that search code can keep, copy or drop it freely; beam search reorders it
with :func:`reorder_incremental_state` when hypotheses are re-ranked.

An entry with a ``"length"`` keeps its keys/values in a buffer with room to grow
(``AttentionBase.cache_append``). Reordering one copies only the ``length`` filled positions, into
a new buffer with room for exactly one more step: beam search reorders after every step, so the
next step's keys fill the buffer and attention reads one contiguous tensor (a strided slice of a
larger buffer costs the matrix product a copy of its own)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from nmt.models.attention import IncrementalState


def new_incremental_state() -> IncrementalState:
    return {}


def reorder_incremental_state(state: IncrementalState, new_order: Tensor) -> None:
    """In place: row b of every cached tensor becomes old row ``new_order[b]`` (batch dim 0)."""
    for key, entry in state.items():
        state[key] = _reorder_entry(entry, new_order)


def _reorder_entry(entry: dict[str, Any], order: Tensor) -> dict[str, Any]:
    length = entry.get("length")
    if length is None:
        return {name: t.index_select(0, order) if isinstance(t, Tensor) else t for name, t in entry.items()}
    out: dict[str, Any] = {"length": length}
    for name in ("k", "v"):
        buf = entry[name]  # (B, H, capacity, D)
        B, H, _, D = buf.shape
        target = buf.new_empty((order.numel(), H, length + 1, D))  # (B', H, length + 1, D)
        torch.index_select(buf[:, :, :length], 0, order, out=target[:, :, :length])
        out[name] = target
    return out
