"""Greedy decoding: the most probable token at every step (beam search's beam-1 fast path)."""

from __future__ import annotations

import torch

from nmt.generation.path_search import PathSearch
from nmt.registry import register_search


@register_search("greedy")
class GreedySearch(PathSearch):
    """Greedy decoding (what --beam 1 runs)."""

    def choose(self, lprobs: torch.Tensor) -> torch.Tensor:
        return lprobs.argmax(dim=1)  # (N,)
