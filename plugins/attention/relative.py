"""Relative-position self-attention (Shaw, Uszkoreit & Vaswani 2018, "Self-Attention with Relative
Position Representations"): every query-key pair gets a learned vector for the distance j - i,
clipped to [-k, k] (``--max-relative-position k``, per site ``--encoder-max-relative-position`` /
``--decoder-max-relative-position``). With a^K, a^V the 2k + 1 learned vectors of size d_k (a^K, the
keys' size) and d_v (a^V, the values'), shared by the heads (eq. 3-5); d_k = d_v = d_model / H unless
``--attention-key-dim``:

    e_ij = q_i (k_j + a^K_ij)^T / sqrt(d_k),   z_i = sum_j alpha_ij (v_j + a^V_ij),   a_ij = a[clip(j - i, k)]

The (T, S, d) tensor of a_ij is never built: the position term of the scores is q @ a^K^T, one
(T, 2k + 1) product per head, gathered by each pair's distance bucket; the value term adds up the
weights per bucket (a scatter into (T, 2k + 1)) and multiplies by a^V. Extra cost over dot-product
attention: O(T * S) memory per head for the gather / scatter, O(T * k * d) work, (2k + 1) (d_k + d_v)
parameters per layer, and no fused kernel.

While decoding, the queries are the last T of the S cached keys, so query t sits at position
S - T + t of the cache. The default cache is kept on purpose: rows that joined later are
right-aligned in it (left pads, masked), so both ends of every distance move together and j - i
stays each row's own distance; beam reordering and merging need no extra state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor, nn

from nmt.fields import opt
from nmt.models.attention import AttentionBase, allowed_mask, attention_weights
from nmt.registry import register_attention


def relative_buckets(tgt_len: int, src_len: int, max_distance: int, device: torch.device) -> Tensor:
    """(T, S) long: the embedding row of each query-key pair, clip(j - i, k) + k. The T queries
    are the last T of the S key positions (T = S without a cache)."""
    i = torch.arange(src_len - tgt_len, src_len, device=device)[:, None]  # (T, 1) query positions
    j = torch.arange(src_len, device=device)[None, :]  # (1, S) key positions
    return (j - i).clamp(-max_distance, max_distance) + max_distance  # (T, S)


@dataclass
class RelativeConfig:
    max_relative_position: int = opt(16, "Clipping distance k of relative-position attention: keys farther "
                                         "than k positions share the embedding of distance k.", low=1)


@register_attention("relative", config=RelativeConfig)
class RelativePositionAttention(AttentionBase[RelativeConfig]):
    """Self-attention with learned relative-position keys and values (Shaw et al. 2018)."""

    supports_cross_attention = False
    supports_key_dim = True
    exportable = True  # engines run no left pads: the cache's last key is the query's own position

    def __init__(self, cfg: RelativeConfig, embed_dim: int, num_heads: int, **kwargs: Any):
        super().__init__(cfg, embed_dim, num_heads, **kwargs)
        self.max_distance = cfg.max_relative_position
        buckets = 2 * self.max_distance + 1
        # a^K and a^V: one row per clipped distance -k..k, shared by the heads as in the paper.
        self.relative_keys = nn.Parameter(torch.empty(buckets, self.key_dim))  # (2k+1, d_k)
        self.relative_values = nn.Parameter(torch.empty(buckets, self.head_dim))  # (2k+1, D)
        for table in (self.relative_keys, self.relative_values):
            nn.init.normal_(table, mean=0.0, std=table.size(1) ** -0.5)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor], causal: bool,
               need_weights: bool) -> tuple[Tensor, Optional[Tensor]]:
        B, H, T, _ = q.shape
        S = k.size(2)
        index = relative_buckets(T, S, self.max_distance, q.device).expand(B, H, T, S)  # (B, H, T, S)
        content = q @ k.transpose(-2, -1)  # (B, H, T, S)
        position = (q @ self.relative_keys.t()).gather(-1, index)  # (B, H, T, 2k+1) -> (B, H, T, S)
        mask = allowed_mask(T, S, key_padding_mask, causal, q.device)
        weights = attention_weights((content + position) * self.scale, mask).to(v.dtype)  # (B, H, T, S)
        alpha = self.attention_dropout(weights)  # (B, H, T, S)
        # A clipped bucket sums up to S weights: in fp32 under bf16/fp16 autocast, as the softmax.
        acc = torch.float32 if alpha.dtype in (torch.float16, torch.bfloat16) else alpha.dtype
        per_bucket = alpha.new_zeros(B, H, T, self.relative_values.size(0), dtype=acc)  # (B, H, T, 2k+1)
        per_bucket = per_bucket.scatter_add(-1, index, alpha.to(acc)).to(alpha.dtype)
        out = alpha @ v + per_bucket @ self.relative_values  # (B, H, T, D), D the values' size
        return out, (weights if need_weights else None)
