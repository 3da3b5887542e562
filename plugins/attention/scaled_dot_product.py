"""Scaled dot-product attention (paper section 3.2.1): softmax(QK^T / sqrt(d_k)) V per head.

The fast path is torch's fused ``scaled_dot_product_attention`` (``is_causal`` instead of a mask
when there is no padding); the weights, when asked for, come from the explicit computation. Both
take values of another size than queries and keys (``--attention-key-dim``): torch's kernel scales
by the queries' last dimension, d_k, as :attr:`AttentionBase.scale` does."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.models.attention import AttentionBase, allowed_mask, explicit_attention
from nmt.registry import NoOptions, register_attention

FEW_QUERIES = 16  # up to this many queries per row, the explicit product is faster on the CPU ...
TINY = 10  # ... unless the batch has at most this many queries in all (one sentence's beams): one fused call is
# cheaper than the explicit path's six (a lone sentence at beam 5 answers about a tenth sooner)


@register_attention("scaled_dot_product")
class ScaledDotProductAttention(AttentionBase[NoOptions]):
    """softmax(QK^T/sqrt(d_k))V with h heads (fused kernel unless weights are requested)."""

    supports_key_dim = True
    supports_fp32_cache = True
    supports_key_window = True
    exportable = True

    def step_attend(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
        """The explicit products, as attend() computes a decoding step of more than a few rows (no branch on
        sizes, which a traced graph would fix)."""
        return explicit_attention(q, k, v, key_padding_mask, self.causal, self.scale, self.attention_dropout)[0]

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor], causal: bool,
               need_weights: bool) -> tuple[Tensor, Optional[Tensor]]:
        T, S = q.size(2), k.size(2)
        dropout = self.dropout if self.training else 0.0
        # On the CPU the fused kernel's backward is slower than the explicit product (5x in bf16,
        # 1.25x in fp32 at the benchmarks/train_throughput.py shapes), and so is its forward for the
        # few queries of a decoding step (the one query of a row, or a sentence's beams sharing its
        # encoder rows: 3x in bf16 at beam 5 x batch 128), so those take the explicit path; encoding,
        # tiny batches and CUDA keep the fused kernel.
        # (compiled code takes the explicit path for any batch: inductor fuses it, and no branch on the row count
        # makes it compile once more when a batch crosses TINY)
        explicit_on_cpu = ((T <= FEW_QUERIES and (torch.compiler.is_compiling() or q.size(0) * T > TINY))
                           or (torch.is_grad_enabled() and q.requires_grad))
        if need_weights or (not q.is_cuda and explicit_on_cpu):
            out, weights = explicit_attention(q, k, v, key_padding_mask, causal, self.scale, self.attention_dropout)
            return out, (weights if need_weights else None)  # (B, H, T, D), (B, H, T, S) or None
        if causal and T == S and key_padding_mask is None:  # no mask is materialised
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True), None
        mask = allowed_mask(T, S, key_padding_mask, causal, q.device)  # (B|1, 1, T|1, S) or None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout), None  # (B, H, T, D)
