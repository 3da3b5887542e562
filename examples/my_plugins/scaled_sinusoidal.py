"""Scaled sinusoidal positions: the paper's sinusoids times one trained scalar, so the model can
choose how loud positions are next to the (scaled) token embeddings.

Use it with: nmt-train DATA --user-dir examples/my_plugins --positional scaled_sinusoidal
"""

import torch
from torch import nn

from nmt.models.positional import PositionalBase
from nmt.plugins.positional.sinusoidal import sinusoid_table
from nmt.registry import NoOptions, register_positional


@register_positional("scaled_sinusoidal")
class ScaledSinusoidalPositional(PositionalBase[NoOptions]):
    """Sinusoids (any length) multiplied by a trained scale that starts at 1."""

    def __init__(self, cfg, embed_dim, max_positions, option="--max-source-positions"):
        super().__init__(cfg, embed_dim, max_positions, option)
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, length, offset=0):
        table = sinusoid_table(offset + length, self.embed_dim, self.scale.device)  # (offset+length, C)
        return self.scale * table[offset:]  # (length, C)
