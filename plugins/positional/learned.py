"""Learned positions: a trained (max_positions, d) table, as in the paper's Table 3 row (E)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmt.errors import DataError
from nmt.models.positional import PositionalBase
from nmt.registry import NoOptions, register_positional


@register_positional("learned")
class LearnedPositional(PositionalBase[NoOptions]):
    """One trained vector per position, up to the configured maximum."""

    def __init__(self, cfg: NoOptions, embed_dim: int, max_positions: int, option: str = "--max-source-positions"):
        super().__init__(cfg, embed_dim, max_positions, option)
        self.weight = nn.Parameter(torch.empty(max_positions, embed_dim))
        nn.init.normal_(self.weight, mean=0.0, std=embed_dim ** -0.5)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        end = offset + length
        if end > self.max_positions:
            raise DataError(f"a sequence of {end} tokens is longer than the learned positional table "
                            f"({self.option} {self.max_positions}); train a model with a larger {self.option} "
                            "or filter out long sentences")
        return self.weight[offset:end]  # (length, C)

