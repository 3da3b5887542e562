"""No positional encoding: the tokens' order reaches the model only through attention plugins that
see it themselves (``--attention relative``, as Shaw et al. 2018 ran it: relative positions in place
of absolute ones). With order-blind attention the model sees a bag of words."""

from __future__ import annotations

import torch
from torch import Tensor

from nmt.models.positional import PositionalBase
from nmt.registry import NoOptions, register_positional


@register_positional("none")
class NoPositional(PositionalBase[NoOptions]):
    """Adds nothing (zeros of the embedding size)."""

    zero: Tensor  # a buffer

    def __init__(self, cfg: NoOptions, embed_dim: int, max_positions: int, option: str = "--max-source-positions"):
        super().__init__(cfg, embed_dim, max_positions, option)
        self.register_buffer("zero", torch.zeros(1, embed_dim), persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        return self.zero.expand(length, self.embed_dim)  # (length, C), no memory per position

    def at(self, positions: Tensor) -> Tensor:
        return self.zero.expand(positions.size(0), self.embed_dim)  # (B, C)
