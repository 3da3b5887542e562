"""The decoder's cache while generating: one entry per attention module (its keys and values).

A plain dict so that search code can keep, copy or drop it freely; beam search reorders it
with :func:`reorder_incremental_state` when hypotheses are re-ranked."""

from __future__ import annotations

from torch import Tensor

from nmt.models.attention import IncrementalState


def new_incremental_state() -> IncrementalState:
    return {}


def reorder_incremental_state(state: IncrementalState, new_order: Tensor) -> None:
    """In place: row b of every cached tensor becomes old row ``new_order[b]`` (batch dim 0)."""
    for key, entry in state.items():
        state[key] = {name: t.index_select(0, new_order) if isinstance(t, Tensor) else t
                      for name, t in entry.items()}
