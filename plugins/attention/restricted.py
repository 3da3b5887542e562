"""Restricted self-attention (paper Table 1): each query sees only the keys within distance r
(``--attention-window r``, per site ``--encoder-attention-window`` / ``--decoder-attention-window``);
in the decoder, the r previous keys and itself.

Computed blockwise: queries are cut into blocks of b positions and each block attends to its
own window of b + 2r keys (a strided view of the padded keys), so scores take O(n * (b + 2r))
memory instead of O(n^2). While generating, the cache keeps only the last r + 1 keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.fields import opt
from nmt.models.attention import AttentionBase, softmax_attention
from nmt.models.decoder_cache import CacheEntry
from nmt.registry import register_attention

MIN_BLOCK = 32  # query block size floor: tiny blocks waste time in per-block overhead


def band(tgt_len: int, src_len: int, offset: int, r: int, causal: bool, device: torch.device) -> Tensor:
    """(T, S) bool: query i sits at key position i + offset and sees keys within distance r."""
    dist = torch.arange(src_len, device=device)[None, :] - torch.arange(tgt_len, device=device)[:, None] - offset
    return (dist >= -r) & (dist <= (0 if causal else r))


@dataclass
class RestrictedConfig:
    attention_window: int = opt(16, "Each query sees the keys within this distance (the r previous ones in the "
                                    "decoder).", low=0)


@register_attention("restricted", config=RestrictedConfig)
class RestrictedAttention(AttentionBase[RestrictedConfig]):
    """Self-attention limited to a neighbourhood of r positions (O(r*n*d) cost)."""

    supports_cross_attention = False
    supports_key_dim = True  # keys and values are windowed alike; only their last sizes differ
    exportable = True

    def __init__(self, cfg: RestrictedConfig, embed_dim: int, num_heads: int, **kwargs: Any):
        super().__init__(cfg, embed_dim, num_heads, **kwargs)
        self.window = cfg.attention_window

    def cache_append(self, cached: Optional[CacheEntry], k: Tensor, v: Tensor) -> tuple[CacheEntry, Tensor, Tensor]:
        """Keeps only the last r + 1 keys (an entry without a length: all of it is filled): O(r) memory and
        work per generated token."""
        if cached is not None:
            k = torch.cat([cached.k, k], dim=2)  # (B, H, <= r + 1 + T, D)
            v = torch.cat([cached.v, v], dim=2)
        keep = self.window + 1  # the next query sees these r keys and itself
        return CacheEntry(k[:, :, -keep:], v[:, :, -keep:]), k, v

    def step_keep(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """The last r + 1 keys/values, as :meth:`cache_append` keeps them."""
        # positions picked by index (torch.export fixes whether a slice of a dynamic length is contiguous)
        t = k.size(-2)
        if torch.jit.is_tracing():  # torch.onnx's tracer: sizes are tensors, and this slice of one stays dynamic
            keep = torch.arange(t, device=k.device)[-(self.window + 1):]  # (<= r + 1,)
        else:  # sizes, symbolic under torch.export: AOTInductor compiles a negative slice of one as if it were full
            keep = torch.arange(torch.sym_max(t - self.window - 1, 0), t, device=k.device)
        return k.index_select(-2, keep), v.index_select(-2, keep)  # (..., t, d): positions on the last axis but one

    def step_attend(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
        """The band as one masked product over every key (no blocks: their count depends on the length, which a
        traced graph must not fix); the encoder's pad query with only pads around it sees itself, as in blocks."""
        T, S = q.size(2), k.size(2)
        mask = band(T, S, S - T, self.window, self.causal, q.device)  # (T, S)
        if key_padding_mask is not None:
            mask = mask & ~key_padding_mask[:, None, None, :]  # (B, 1, T, S)
            empty = ~mask.any(-1, keepdim=True)  # (B, 1, T, 1)
            mask = mask | (empty & band(T, S, S - T, 0, True, q.device))
        return softmax_attention((q @ k.transpose(-2, -1)) * self.scale, v, mask, self.attention_dropout)[0]

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor], causal: bool,
               need_weights: bool) -> tuple[Tensor, Optional[Tensor]]:
        T, S = q.size(2), k.size(2)
        dropout = self.dropout if self.training else 0.0
        if T != S:  # generating: the T queries are the last T key positions
            mask = band(T, S, S - T, self.window, causal, q.device)  # (T, S)
            if key_padding_mask is not None:
                mask = mask & ~key_padding_mask[:, None, None, :]  # (B, 1, T, S)
            if need_weights:
                return softmax_attention((q @ k.transpose(-2, -1)) * self.scale, v, mask, self.attention_dropout)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout), None
        return self._blockwise(q, k, v, key_padding_mask, causal, need_weights, dropout)

    def _blockwise(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor], causal: bool,
                   need_weights: bool, dropout: float) -> tuple[Tensor, Optional[Tensor]]:
        B, H, T, Dk = q.shape
        D = v.size(3)  # the values' size (d_k = D unless --attention-key-dim)
        r = min(self.window, T - 1)  # farther keys do not exist
        b = min(T, max(r, MIN_BLOCK))  # queries per block
        nb = -(-T // b)
        Tp = nb * b
        left, right = r, (0 if causal else r)
        width = b + left + right  # keys seen by one block
        q5 = F.pad(q, (0, 0, 0, Tp - T)).view(B, H, nb, b, Dk)  # (B, H, nb, b, d_k)
        kv_pad = (0, 0, left, Tp - T + right)
        k5 = F.pad(k, kv_pad).unfold(2, width, b).transpose(-1, -2)  # (B, H, nb, width, d_k)
        v5 = F.pad(v, kv_pad).unfold(2, width, b).transpose(-1, -2)  # (B, H, nb, width, D)
        real = torch.ones(B, T, dtype=torch.bool, device=q.device) if key_padding_mask is None else ~key_padding_mask
        key_ok = F.pad(real, (left, Tp - T + right), value=False).unfold(1, width, b)  # (B, nb, width)
        local = band(b, width, left, r, causal, q.device)  # (b, width), same for every block
        mask = local & key_ok[:, :, None, :]  # (B, nb, b, width)
        empty = ~mask.any(-1, keepdim=True)  # a pad query with only pads around it: a NaN row
        mask = (mask | (empty & band(b, width, left, 0, True, q.device))).unsqueeze(1)  # (B, 1, nb, b, width)
        if not need_weights:
            out = F.scaled_dot_product_attention(q5, k5, v5, attn_mask=mask, dropout_p=dropout)  # (B,H,nb,b,D)
            return out.reshape(B, H, Tp, D)[:, :, :T], None
        scores = (q5 @ k5.transpose(-2, -1)) * self.scale  # (B, H, nb, b, width)
        out, w5 = softmax_attention(scores, v5, mask, self.attention_dropout)
        dense = q.new_zeros(B, H, Tp, Tp + left + right)  # only for inspection: O(n^2) by design
        for n in range(nb):
            dense[:, :, n * b:(n + 1) * b, n * b:n * b + width] = w5[:, :, n]
        return out.reshape(B, H, Tp, D)[:, :, :T], dense[:, :, :T, left:left + T]
