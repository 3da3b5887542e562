"""Multiplicative (Luong "general") attention: score(q, k) = q^T W k, one W per head.

Use it with: nmt-train DATA --user-dir examples/my_plugins --attention multiplicative
             [--multiplicative-init random]
"""

from dataclasses import dataclass

import torch
from torch import nn

from nmt.fields import opt
from nmt.models.attention import AttentionBase, allowed_mask, softmax_attention
from nmt.registry import register_attention


@dataclass
class MultiplicativeConfig:
    multiplicative_init: str = opt("identity", "How W starts: identity (dot-product attention at first) or random.",
                                   choices=["identity", "random"])


@register_attention("multiplicative", config=MultiplicativeConfig)
class MultiplicativeAttention(AttentionBase[MultiplicativeConfig]):
    """score(q, k) = q^T W k with a trained W per head."""

    def __init__(self, cfg: MultiplicativeConfig, embed_dim, num_heads, **kwargs):
        super().__init__(cfg, embed_dim, num_heads, **kwargs)
        if cfg.multiplicative_init == "identity":
            w = torch.eye(self.head_dim).repeat(num_heads, 1, 1)  # (H, D, D)
        else:
            w = torch.randn(num_heads, self.head_dim, self.head_dim) / self.head_dim ** 0.5
        self.bilinear = nn.Parameter(w)

    def attend(self, q, k, v, key_padding_mask, causal, need_weights):
        # q (B, H, T, D); k, v (B, H, S, D); key_padding_mask (B, S) True at pads, or None
        scores = (q @ self.bilinear) @ k.transpose(-2, -1) / self.head_dim ** 0.5  # (B, H, T, S)
        mask = allowed_mask(q.size(2), k.size(2), key_padding_mask, causal, q.device)
        out, weights = softmax_attention(scores, v, mask, self.attention_dropout)  # (B, H, T, D)
        return out, (weights if need_weights else None)
