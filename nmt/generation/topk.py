"""The k best of every row of a wide matrix (beam search's candidates: beam x vocabulary per sentence), faster
than ``torch.topk`` on the CPU.

torch's CPU top-k selects over every element of a row; for a full batch of beam-5 candidates over a 10k-word
vocabulary that was a tenth of a decoding step. Cut each row into blocks of BLOCK: a block
holding one of the row's k best has its maximum at or above the row's k-th best value, and so do the k blocks
with the largest maxima; so the k best values all lie in those k blocks (or in the row's last few columns, after
its last whole block). One pass takes every block's maximum (a reduction that vectorizes), a small top-k picks
k blocks, and the final top-k looks at their k x BLOCK values and those last columns only: 3-4x faster on
the same rows."""

from __future__ import annotations

import torch

BLOCK = 64  # measured best of 16, 32, 64 and 128 (16 was slower than torch.topk)


def wide_topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``x.topk(k, dim=1)`` of a (n, w) matrix: the k largest values of each row, largest first, and their
    columns. Equal values may come in another order than torch's (which leaves it unspecified)."""
    n, w = x.shape
    blocks = w // BLOCK
    if x.device.type != "cpu" or blocks < 4 * k:  # narrow rows, or a GPU's own top-k: nothing to gain
        return x.topk(k, dim=1)
    full = blocks * BLOCK
    block_max = x[:, :full].unflatten(1, (blocks, BLOCK)).amax(dim=2)  # (n, blocks)
    best_blocks = block_max.topk(k, dim=1).indices  # (n, k)
    columns = (best_blocks.unsqueeze(2) * BLOCK + torch.arange(BLOCK, device=x.device)).view(n, k * BLOCK)
    if w > full:  # the columns after the last whole block are always looked at
        columns = torch.cat([columns, torch.arange(full, w, device=x.device).expand(n, -1)], 1)
    top_values, at = x.gather(1, columns).topk(k, dim=1)  # (n, k)
    return top_values, columns.gather(1, at)
