"""The positional seam: a plugin maps positions to vectors that are added to the scaled token
embeddings. Registered by name with ``nmt.registry.register_positional``."""

from __future__ import annotations

from typing import Generic

import torch
from torch import Tensor, nn

from nmt.registry import OptionsT


class PositionalBase(nn.Module, Generic[OptionsT]):
    """Gives the encodings of positions ``offset .. offset+length-1``.

    Constructed as ``cls(cfg, embed_dim, max_positions, option)``: ``cfg`` is the plugin's own options (its
    type argument: ``PositionalBase[NoOptions]``), ``max_positions`` the longest sequence the model takes and
    ``option`` the flag that sets it (for error messages); plugins without a table ignore them."""

    def __init__(self, cfg: OptionsT, embed_dim: int, max_positions: int, option: str = "--max-source-positions"):
        super().__init__()
        self.cfg = cfg
        self.embed_dim = embed_dim
        self.max_positions = max_positions
        self.option = option

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """(length, embed_dim) encodings, broadcast over the batch by the caller."""
        raise NotImplementedError

    def at(self, positions: Tensor) -> Tensor:
        """(B, embed_dim) encodings of one position per row (rows decoding at different steps).
        The default reads them from ``forward``'s table; a plugin may compute them directly. Compiled
        code (``--compile``) takes the whole table, since reading the largest position would split the
        compiled decoder step in two (a graph break); the search never goes past ``max_positions``."""
        if torch.compiler.is_compiling():
            table = self(self.max_positions, 0)  # (max_positions, C)
        else:
            table = self(int(positions.max()) + 1, 0)  # (max + 1, C)
        return torch.index_select(table, 0, positions)
