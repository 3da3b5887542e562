"""fairseq's sinusoidal positions, for models imported from fairseq (nmt-import-fairseq).

They differ from the paper's (plugins/positional/sinusoidal.py) in two ways an imported model
depends on: the sin and cos halves are concatenated instead of interleaved, with frequencies
10000^(-i/(d/2-1)), and position numbers start after the padding index (pad + 1 = 2)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from nmt.plugins.positional.sinusoidal import SinusoidalPositional
from nmt.registry import register_positional

PAD_OFFSET = 2  # fairseq numbers positions from padding_idx + 1; our dictionaries' <pad> is 1


def fairseq_sinusoid_table(length: int, dim: int, device: torch.device | None = None) -> Tensor:
    """(length, dim) float32 table of fairseq positions 0 .. length-1 (row i = fairseq position i)."""
    half = dim // 2
    step = math.log(10000.0) / (half - 1)
    freq = torch.exp(torch.arange(half, dtype=torch.float32, device=device) * -step)  # (half,)
    angles = torch.arange(length, dtype=torch.float32, device=device)[:, None] * freq[None, :]  # (L, half)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)  # (L, 2*half)
    if dim % 2:
        table = torch.cat([table, torch.zeros(length, 1, device=device)], dim=1)  # (L, dim)
    return table


@register_positional("fairseq_sinusoidal")
class FairseqSinusoidalPositional(SinusoidalPositional):
    """fairseq's fixed sinusoids (concatenated halves, positions offset by the padding index)."""

    first_position = PAD_OFFSET

    @staticmethod
    def make_table(length: int, dim: int, device: torch.device | None = None) -> Tensor:
        return fairseq_sinusoid_table(length, dim, device)
