"""One encoder layer and one decoder layer: attention and feed-forward sub-layers, each wrapped
in dropout + residual + LayerNorm, post-norm as in the paper (LayerNorm(x + Sublayer(x))) or
pre-norm (x + Sublayer(LayerNorm(x))) with --encoder/decoder-normalize-before."""

from __future__ import annotations

from typing import Callable, Optional

import torch.nn.functional as F
from torch import Tensor, nn

from nmt.models.attention import AttentionBase
from nmt.models.decoder_cache import DecoderCache, KeyWindow

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu}


class FeedForward(nn.Module):
    """Position-wise FFN: activation(x W1 + b1) W2 + b2, on any leading shape."""

    def __init__(self, dim: int, hidden: int, activation: str, activation_dropout: float):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.activation = ACTIVATIONS[activation]
        self.activation_dropout = nn.Dropout(activation_dropout)
        # fc1/fc2 keep PyTorch's default Linear init (uniform in +-1/sqrt(fan_in)), as fairseq's do.

    def forward(self, x: Tensor) -> Tensor:
        h = self.activation(self.fc1(x))  # (..., d_ff)
        h = self.activation_dropout(h)
        return self.fc2(h)  # (..., d_model)


class Residual(nn.Module):
    """Dropout, residual add and LayerNorm around one sub-layer, in post- or pre-norm order."""

    def __init__(self, dim: int, dropout: float, normalize_before: bool):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)
        self.normalize_before = normalize_before

    def pre(self, x: Tensor) -> Tensor:
        """The sub-layer's input."""
        return self.norm(x) if self.normalize_before else x

    def post(self, residual: Tensor, y: Tensor) -> Tensor:
        """Combine the sub-layer's output ``y`` with the layer input ``residual``."""
        x = residual + self.dropout(y)
        return x if self.normalize_before else self.norm(x)


class EncoderLayer(nn.Module):
    """Self-attention then FFN."""

    def __init__(self, self_attn: AttentionBase, ffn: FeedForward, dim: int, dropout: float, normalize_before: bool):
        super().__init__()
        self.self_attn = self_attn
        self.attn_res = Residual(dim, dropout, normalize_before)
        self.ffn = ffn
        self.ffn_res = Residual(dim, dropout, normalize_before)

    def forward(self, x: Tensor, padding_mask: Optional[Tensor],
                need_weights: bool = False) -> tuple[Tensor, Optional[Tensor]]:
        y, weights = self.self_attn(self.attn_res.pre(x), key_padding_mask=padding_mask,
                                    need_weights=need_weights)  # (B, S, C)
        x = self.attn_res.post(x, y)
        x = self.ffn_res.post(x, self.ffn(self.ffn_res.pre(x)))  # (B, S, C)
        return x, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, then FFN."""

    def __init__(self, self_attn: AttentionBase, cross_attn: AttentionBase, ffn: FeedForward, dim: int,
                 dropout: float, normalize_before: bool):
        super().__init__()
        self.self_attn = self_attn
        self.self_res = Residual(dim, dropout, normalize_before)
        self.cross_attn = cross_attn
        self.cross_res = Residual(dim, dropout, normalize_before)
        self.ffn = ffn
        self.ffn_res = Residual(dim, dropout, normalize_before)

    def forward(self, x: Tensor, memory: Tensor, memory_padding_mask: Optional[Tensor],
                incremental_state: Optional[DecoderCache] = None,
                need_weights: bool = False, self_padding_mask: Optional[Tensor] = None,
                self_key_window: Optional[KeyWindow] = None) -> tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
        """x (B, T, C), memory = encoder output (B, S, C). ``self_padding_mask`` (B, t) marks cached
        positions a row does not own (rows that started decoding later), and ``self_key_window`` says which of
        them the self-attention may leave out. Returns x and the self/cross weights."""
        y, self_w = self.self_attn(self.self_res.pre(x), key_padding_mask=self_padding_mask,
                                   incremental_state=incremental_state, need_weights=need_weights,
                                   key_window=self_key_window)  # (B, T, C)
        x = self.self_res.post(x, y)
        y, cross_w = self.cross_attn(self.cross_res.pre(x), memory, key_padding_mask=memory_padding_mask,
                                     incremental_state=incremental_state, need_weights=need_weights)  # (B, T, C)
        x = self.cross_res.post(x, y)
        x = self.ffn_res.post(x, self.ffn(self.ffn_res.pre(x)))  # (B, T, C)
        return x, self_w, cross_w
