"""Multiplicative (Luong "general") attention: score(q, k) = q^T W k, one W per head.

Use it with: nmt-train DATA --user-dir docs/examples/my_plugins --attention multiplicative
"""

import torch
from torch import nn

from nmt.models.attention import AttentionBase, allowed_mask, softmax_attention
from nmt.registry import register_attention


@register_attention("multiplicative")
class MultiplicativeAttention(AttentionBase):
    """score(q, k) = q^T W k with a trained W per head (initialised to the identity)."""

    def __init__(self, embed_dim, num_heads, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        self.bilinear = nn.Parameter(torch.eye(self.head_dim).repeat(num_heads, 1, 1))  # (H, D, D)

    def attend(self, q, k, v, key_padding_mask, causal, need_weights):
        # q (B, H, T, D); k, v (B, H, S, D); key_padding_mask (B, S) True at pads, or None
        scores = (q @ self.bilinear) @ k.transpose(-2, -1) / self.head_dim ** 0.5  # (B, H, T, S)
        mask = allowed_mask(q.size(2), k.size(2), key_padding_mask, causal, q.device)
        out, weights = softmax_attention(scores, v, mask, self.dropout, self.training)  # (B, H, T, D)
        return out, (weights if need_weights else None)
