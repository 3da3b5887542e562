"""Additive (Bahdanau) attention, multi-head: score(q, k) = v^T tanh(W_q q + W_k k) per head.

W_q and W_k are the shared query/key projections of the base class (their biases act as the
bias inside tanh); each head has its own vector v, of the query/key size d_k (``--attention-key-dim``;
values keep d_model / H). The (B, H, T, S, d_k) tanh term makes it cost O(T*S*d_k) memory, which is
why the paper prefers dot products."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor, nn

from nmt.models.attention import AttentionBase, allowed_mask, softmax_attention
from nmt.registry import NoOptions, register_attention


@register_attention("additive")
class AdditiveAttention(AttentionBase[NoOptions]):
    """v^T tanh(W_q q + W_k k) scores, softmax over keys, weighted sum of values."""

    supports_key_dim = True
    exportable = True

    def __init__(self, cfg: NoOptions, embed_dim: int, num_heads: int, **kwargs: Any):
        super().__init__(cfg, embed_dim, num_heads, **kwargs)
        self.score_vector = nn.Parameter(torch.empty(num_heads, self.key_dim))  # v, one per head (H, d_k)
        nn.init.uniform_(self.score_vector, -self.key_dim ** -0.5, self.key_dim ** -0.5)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor], causal: bool,
               need_weights: bool) -> tuple[Tensor, Optional[Tensor]]:
        T, S = q.size(2), k.size(2)
        hidden = torch.tanh(q.unsqueeze(3) + k.unsqueeze(2))  # (B, H, T, S, d_k)
        scores = hidden @ self.score_vector[None, :, None, :, None]  # (B, H, T, S, 1)
        mask = allowed_mask(T, S, key_padding_mask, causal, q.device)
        out, weights = softmax_attention(scores.squeeze(-1), v, mask, self.attention_dropout)  # (B, H, T, D)
        return out, (weights if need_weights else None)
