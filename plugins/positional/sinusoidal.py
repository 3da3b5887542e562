"""Sinusoidal positions (paper section 3.5): PE(pos, 2i) = sin(pos / 10000^(2i/d)),
PE(pos, 2i+1) = cos(pos / 10000^(2i/d)). No parameters; any length."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from nmt.models.positional import PositionalBase
from nmt.registry import NoOptions, register_positional


def sinusoid_table(length: int, dim: int, device: torch.device | None = None) -> Tensor:
    """(length, dim) float32 table, sin on even and cos on odd columns."""
    pos = torch.arange(length, dtype=torch.float32, device=device)[:, None]  # (L, 1)
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32, device=device)
                         * (-math.log(10000.0) / dim))  # (ceil(d/2),)
    angles = pos * inv_freq  # (L, ceil(d/2))
    table = torch.zeros(length, dim, device=device)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : dim // 2])
    return table


@register_positional("sinusoidal")
class SinusoidalPositional(PositionalBase[NoOptions]):
    """Fixed sinusoids; the table grows on demand and is not saved in checkpoints."""

    first_position = 0  # the table row of position 0 (a subclass may number positions from elsewhere)
    table: Tensor  # a buffer, not saved

    @staticmethod
    def make_table(length: int, dim: int, device: torch.device | None = None) -> Tensor:
        return sinusoid_table(length, dim, device)

    def __init__(self, cfg: NoOptions, embed_dim: int, max_positions: int, option: str = "--max-source-positions"):
        super().__init__(cfg, embed_dim, max_positions, option)
        self.register_buffer("table", self.make_table(max(max_positions, 1) + self.first_position, embed_dim),
                             persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        start = offset + self.first_position
        end = start + length
        if end > self.table.size(0):
            self.table = self.make_table(max(end, 2 * self.table.size(0)), self.embed_dim, self.table.device)
        return self.table[start:end]  # (length, C)
