"""Dropout with a cheaper random mask on the CPU.

torch's CPU dropout draws one Bernoulli sample per element (``bernoulli_``), the largest cost of a small
model's training update after the matrix products. Here one 64-bit
draw of the default generator decides four elements (16 bits each), a quarter of the draws, and the
mask costs a third of the time (docs/training.md). The keep probability is rounded to a multiple of
1/65,536 and the kept values are scaled by its exact inverse, so the expected output is still the input.
The draws come from torch's default generator, which checkpoints save and restore, so a resumed run is
still exact. Other devices use torch's own dropout (a fused kernel on GPUs).

:class:`LaneDropout` is ``nn.Dropout`` with this mask; ``nmt.cpu_speed.swap_layers`` puts it in a plain model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_LEVELS = 1 << 16  # a 16-bit lane of a random int64 per element


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout(x, p, training)``: each element zeroed with probability ``p``, the rest scaled by 1 / (1 - p)."""
    if not training or p == 0.0:
        return x
    dropped = round(p * _LEVELS)  # elements whose lane is below this (as an unsigned 16-bit number) are dropped
    if x.device.type != "cpu" or not 0 < dropped < _LEVELS:
        # p = 1, p out of range, or p within 1/131,072 of 0 or 1 (too fine for 16 bits): torch's own answer
        return F.dropout(x, p=p, training=True)
    n = x.numel()
    lanes = torch.randint(-(1 << 63), (1 << 63) - 1, ((n + 3) // 4,), dtype=torch.int64).view(torch.int16)
    keep = lanes[:n].view(x.shape) >= dropped - (_LEVELS // 2)  # int16 lanes are uniform on [-32768, 32767]
    return x * keep.to(x.dtype).mul_(_LEVELS / (_LEVELS - dropped))


class LaneDropout(nn.Dropout):
    """``nn.Dropout`` (same ``p``, same train/eval switch) whose mask is :func:`dropout`'s."""

    @classmethod
    def replacing(cls, module: nn.Dropout) -> LaneDropout:
        """A LaneDropout with ``module``'s rate, in its train/eval mode."""
        return cls(module.p).train(module.training)

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)
