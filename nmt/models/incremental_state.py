"""The decoder's cache while generating: one entry per attention module (its keys and values).

A plain dict so that search code can keep, copy or drop it freely; beam search reorders it
with :func:`reorder_incremental_state` when hypotheses are re-ranked.

An entry with a ``"length"`` keeps its keys/values in a buffer with room to grow
(``AttentionBase.cache_append``). Reordering one copies only the ``length`` filled positions, into
the buffer the previous reorder left behind (``"spare"``) when the row count is unchanged: beam
search reorders every step, and copying whole buffers into fresh memory used to cost it more than
the attention itself."""

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
    rows = order.numel()
    spare = entry.get("spare")
    out: dict[str, Any] = {"length": length}
    for name in ("k", "v"):
        buf = entry[name]  # (B, H, capacity, D)
        target = spare[name] if spare is not None and spare[name].shape[0] == rows \
            and spare[name].shape[1:] == buf.shape[1:] else buf.new_empty((rows, *buf.shape[1:]))
        torch.index_select(buf[:, :, :length], 0, order, out=target[:, :, :length])
        out[name] = target
    out["spare"] = {"k": entry["k"], "v": entry["v"]}
    return out
