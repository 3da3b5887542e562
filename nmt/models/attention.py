"""The attention seam: projections, key/value cache and head reshaping live here once; a plugin
only says how queries attend to keys (:meth:`AttentionBase.attend`).

Tensors are batch-first. Inside ``attend`` they are split into heads: ``(B, H, T, D)`` queries and
``(B, H, S, D)`` keys/values, with ``D = d_model / H``. With ``--attention-key-dim`` (the paper's
Table 3 row B) queries and keys have their own size d_k (``key_dim``) and values keep d_model / H
(``head_dim``); a plugin that handles that sets ``supports_key_dim``. A plugin is registered by name,
with its own options (a config dataclass, given to the constructor as ``cfg``)::

    @register_attention("multiplicative", config=MultiplicativeConfig)
    class Multiplicative(AttentionBase[MultiplicativeConfig]):
        def attend(self, q, k, v, key_padding_mask, causal, need_weights): ...
"""

from __future__ import annotations

import math
import uuid
from typing import Generic, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.errors import ConfigError
from nmt.models.decoder_cache import CacheEntry, DecoderCache, KeyWindow
from nmt.registry import OptionsT


def causal_mask(tgt_len: int, src_len: int, device: torch.device) -> Tensor:
    """(T, S) bool, True where query i (aligned to the end of the keys) may see key j."""
    offset = src_len - tgt_len
    i = torch.arange(tgt_len, device=device)[:, None]
    j = torch.arange(src_len, device=device)[None, :]
    return j <= i + offset


def allowed_mask(tgt_len: int, src_len: int, key_padding_mask: Optional[Tensor], causal: bool,
                 device: torch.device) -> Optional[Tensor]:
    """Boolean "may attend" mask broadcastable to (B, H, T, S), or None when everything is allowed."""
    mask = None
    if key_padding_mask is not None:
        mask = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, S)
    if causal and tgt_len > 1:
        c = causal_mask(tgt_len, src_len, device)  # (T, S)
        mask = c if mask is None else mask & c
    return mask


def attention_weights(scores: Tensor, mask: Optional[Tensor]) -> Tensor:
    """Masked softmax over the last axis of ``scores`` (B,H,T,S), computed in fp32 under bf16/fp16 and
    returned in the scores' dtype. For a plugin that mixes values its own way (relative attention)."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    low_precision = scores.dtype in (torch.float16, torch.bfloat16)  # softmax in fp32 then
    return torch.softmax(scores, dim=-1, dtype=torch.float32 if low_precision else None).to(scores.dtype)


LENGTH_MULTIPLE = 4  # training on the CPU in bf16/fp16: the explicit product's lengths, padded to a multiple of this


def pads_lengths(q: Tensor) -> bool:
    """Whether :func:`explicit_attention` pads the lengths: a CPU bf16/fp16 product with autograd (training).

    oneDNN builds and keeps a kernel for each shape of a bf16 batched product, and the attention's shapes
    (batch x heads, length, length) change with nearly every batch of a token-batched epoch: the bf16
    training of the fairseq reference shape built 660 of them in its first 100 updates, each leaving about
    0.7 MB with the process, so its memory grew by 0.6 GB over 240 updates while fp32's stayed flat. With
    both lengths a multiple of 4 it built 234, and ran no slower (docs/training.md). Inference, whose keys grow
    by one at every decoding step out of a cache, keeps its exact lengths."""
    return (q.requires_grad and torch.is_grad_enabled() and q.device.type == "cpu"  # cheapest first: every
            and q.dtype in (torch.bfloat16, torch.float16))  # decoding step asks too, and stops at requires_grad


def explicit_attention(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor], causal: bool,
                       scale: float, dropout: nn.Module | float, training: bool = False) -> tuple[Tensor, Tensor]:
    """softmax(q k^T * scale) v, computed step by step (not torch's fused kernel): q (B,H,T,d_k), k (B,H,S,d_k),
    v (B,H,S,D); ``dropout`` and ``training`` as :func:`softmax_attention` takes them. Returns (output (B,H,T,D),
    weights (B,H,T,S)). In CPU bf16/fp16 training (:func:`pads_lengths`)
    the products run on lengths padded with zeros to a multiple of :data:`LENGTH_MULTIPLE`: padded keys are
    masked out, padded queries are dropped, so no real output or gradient changes."""
    T, S = q.size(2), k.size(2)
    pad_t, pad_s = ((-T % LENGTH_MULTIPLE, -S % LENGTH_MULTIPLE)
                    if pads_lengths(q) and (T == S or not causal) else (0, 0))
    if pad_s:
        k, v = F.pad(k, (0, 0, 0, pad_s)), F.pad(v, (0, 0, 0, pad_s))  # (B, H, S', d_k|D)
        if key_padding_mask is None:
            key_padding_mask = torch.arange(S + pad_s, device=q.device)[None, :] >= S  # (1, S')
        else:
            key_padding_mask = F.pad(key_padding_mask, (0, pad_s), value=True)  # (B, S')
    if pad_t:
        q = F.pad(q, (0, 0, 0, pad_t))  # (B, H, T', d_k)
    mask = allowed_mask(T + pad_t, S + pad_s, key_padding_mask, causal, q.device)
    out, weights = softmax_attention((q @ k.transpose(-2, -1)) * scale, v, mask, dropout, training)
    if pad_t or pad_s:
        return out[:, :, :T], weights[:, :, :T, :S]
    return out, weights


def softmax_attention(scores: Tensor, v: Tensor, mask: Optional[Tensor], dropout: nn.Module | float,
                      training: bool = False) -> tuple[Tensor, Tensor]:
    """Masked softmax over the last axis of ``scores`` (B,H,T,S), dropout on the weights, then weights @ v.
    Returns (output (B,H,T,D), weights before dropout (B,H,T,S)). Shared by plugins that compute their own scores.
    ``dropout`` is the module's ``self.attention_dropout`` (an ``nn.Dropout``, which follows its train/eval mode);
    a rate with ``training`` (the earlier form, ``self.dropout, self.training``) still works, with torch's dropout."""
    weights = attention_weights(scores, mask).to(v.dtype)  # (B,H,T,S)
    dropped = dropout(weights) if isinstance(dropout, nn.Module) else F.dropout(weights, dropout, training)
    return dropped @ v, weights  # (B, H, T, D)


class AttentionBase(nn.Module, Generic[OptionsT]):
    """Multi-head attention with the projections W^Q, W^K, W^V (one fused matrix for
    self-attention), W^O, and an incremental key/value cache.

    Constructed as ``cls(cfg, embed_dim, num_heads, self_attention=..., causal=..., dropout=...)``,
    ``cfg`` being the plugin's own options (its type argument: ``AttentionBase[RestrictedConfig]``), plus
    ``key_dim=d_k`` when ``--attention-key-dim`` sets a per-head query/key size other than d_model / heads.
    Subclasses implement :meth:`attend`.
    ``causal`` means query i may only see keys up to its own position; ``self_attention`` means
    queries, keys and values come from the same input."""

    # A plugin that only makes sense as self-attention sets this False; the builder then keeps
    # the default attention for the encoder-decoder role, and refuses --cross-attention naming it.
    supports_cross_attention = True
    # Whether each query's output depends only on that query and the keys (true of softmax attention).
    # Beam search then keeps one encoder-side cache row per sentence, shared by its beams: the
    # cross-attention below sees a sentence's beams as that many queries of one row. A plugin whose
    # queries interact sets this False, and every beam gets its own copy of the encoder output.
    independent_queries = True
    # Whether attend() takes queries and keys of size key_dim (d_k, --attention-key-dim) with values of
    # size head_dim. Off unless a plugin says so: one written for a single head size may build (D, D)
    # parameters from head_dim, and the builder then refuses the option naming the plugin.
    supports_key_dim = False
    # Whether attend() also works on fp32 queries, keys and values in a bf16 model (it has no parameters of
    # its own, and keeps no cache of its own). Only then does :attr:`cache_dtype` apply to the module.
    supports_fp32_cache = False
    # The dtype a decoding step attends in and the cache keeps keys and values in; None: the model's. bf16
    # inference on the CPU sets fp32 (nmt.cpu_speed.apply.fp32_attention_caches): a step's attention
    # products then run on MKL instead of oneDNN, which builds a kernel for every new shape they take.
    cache_dtype: Optional[torch.dtype] = None
    # Whether attend() depends on the keys only through their values, the mask and their place from the end
    # (the queries being the last of them), so that leading keys masked for every query can be left out of a
    # call (:class:`KeyWindow`). True of softmax attention; a plugin with its own per-key state keeps False.
    supports_key_window = False
    # Whether engines (nmt.engines: ONNX, torch.export) may trace this plugin: its step_attend() is tensor arithmetic
    # with no Python decision on a tensor's values or sizes, and step_keep() keeps what cache_append() keeps. A plugin
    # of your own sets it once both hold (the defaults do for a plugin whose attend() with need_weights=True is
    # such arithmetic and that keeps the default cache); nmt-export --with onnx|compiled refuses it otherwise.
    exportable = False

    def __init__(self, cfg: OptionsT, embed_dim: int, num_heads: int, *, self_attention: bool, causal: bool = False,
                 dropout: float = 0.0, key_dim: Optional[int] = None):
        super().__init__()
        if embed_dim % num_heads:
            raise ConfigError(f"attention: d_model {embed_dim} is not divisible by {num_heads} heads; "
                              "change --encoder/decoder-embed-dim or --encoder/decoder-attention-heads")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads  # d_v: per-head size of values and of the mixed output
        self.key_dim = self.head_dim if key_dim is None else key_dim  # d_k: per-head size of queries and keys
        if self.key_dim < 1:
            raise ConfigError(f"--attention-key-dim {key_dim}: must be >= 1")
        if self.key_dim != self.head_dim and not self.supports_key_dim:
            raise ConfigError(f"--attention-key-dim {key_dim}: attention {type(self).__name__} does not support "
                              f"a key size other than d_model / heads ({self.head_dim}); drop the option")
        if not self_attention and not self.supports_cross_attention:
            raise ConfigError(f"attention {type(self).__name__} is for self-attention only; choose another "
                              "--cross-attention (e.g. scaled_dot_product)")
        self.self_attention = self_attention
        self.causal = causal
        self.attention_dropout = nn.Dropout(dropout)  # on the attention weights (softmax_attention takes it)
        self.cfg = cfg
        qk_size = num_heads * self.key_dim  # H * d_k (embed_dim unless --attention-key-dim)
        if self_attention:
            self.qkv_proj = nn.Linear(embed_dim, 2 * qk_size + embed_dim)
        else:
            self.q_proj = nn.Linear(embed_dim, qk_size)
            self.kv_proj = nn.Linear(embed_dim, qk_size + embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.state_key = f"{type(self).__name__}.{uuid.uuid4().hex}"  # this module's slot in the cache
        self.reset_projections()

    def _block_rows(self, name: str) -> list[int]:
        """Output rows of each of projection ``name``'s W^Q / W^K / W^V / W^O blocks, in order."""
        qk, v = self.num_heads * self.key_dim, self.embed_dim
        return {"qkv_proj": [qk, qk, v], "q_proj": [qk], "kv_proj": [qk, v], "out_proj": [v]}[name]

    def reset_projections(self) -> None:
        """Xavier-uniform per block (W^Q, W^K, W^V: d_model x d_model, or H d_k x d_model for W^Q and
        W^K with --attention-key-dim), so fusing Q, K, V does not change the init.
        The Q, K and V blocks get gain 1/sqrt(2) and keep PyTorch's default bias init, W^O gain 1
        and a zero bias: fairseq's scheme, which measurably converges faster here than gain 1
        everywhere (valid loss after 128 updates on Multi30k, docs/model.md)."""
        for name in ("qkv_proj", "q_proj", "kv_proj", "out_proj"):
            proj = getattr(self, name, None)
            if proj is None:
                continue
            gain = 1.0 if name == "out_proj" else 2 ** -0.5
            for block in proj.weight.data.split(self._block_rows(name), dim=0):
                nn.init.xavier_uniform_(block, gain=gain)
            if name == "out_proj":
                nn.init.zeros_(proj.bias)

    def _heads(self, x: Tensor, parts: int) -> tuple[Tensor, ...]:
        """A projection's output (B, T, N) split into per-head tensors: 3 parts are q, k, v, 2 are k, v
        and 1 is q; queries and keys are (B, H, T, d_k), values (B, H, T, D)."""
        B, T, _ = x.shape
        if self.key_dim == self.head_dim:
            x = x.view(B, T, parts, self.num_heads, self.head_dim)  # (B, T, parts, H, D)
            return x.permute(2, 0, 3, 1, 4).unbind(0)  # parts x (B, H, T, D)
        dims = {1: [self.key_dim], 2: [self.key_dim, self.head_dim], 3: [self.key_dim, self.key_dim, self.head_dim]}
        blocks = x.split([self.num_heads * d for d in dims[parts]], dim=-1)  # (B, T, H*d) each
        return tuple(b.view(B, T, self.num_heads, d).transpose(1, 2) for b, d in zip(blocks, dims[parts]))

    def cache_append(self, cached: Optional[CacheEntry], k: Tensor, v: Tensor) -> tuple[CacheEntry, Tensor, Tensor]:
        """Add a step's keys (B, H, T, d_k) and values (B, H, T, D) to this module's cache entry (None at the
        first step); returns a new entry (the stored one is left as it is) and every key/value so far
        (B, H, t, d_k|D). The default keeps all of them in a buffer that doubles when full (an entry with a
        ``length``), so a step copies only its own keys (no O(t) concatenation per step)."""
        length = 0 if cached is None or cached.length is None else cached.length
        end = length + k.size(2)
        if cached is None or end > cached.k.size(2):
            B, H = k.shape[:2]
            k_buf, v_buf = [t.new_empty(B, H, max(2 * end, 16), t.size(3)) for t in (k, v)]  # (B, H, capacity, d_k|D)
            if cached is not None:
                k_buf[:, :, :length] = cached.k[:, :, :length]
                v_buf[:, :, :length] = cached.v[:, :, :length]
        else:
            k_buf, v_buf = cached.k, cached.v
        k_buf[:, :, length:end] = k
        v_buf[:, :, length:end] = v
        return CacheEntry(k_buf, v_buf, end), k_buf[:, :, :end], v_buf[:, :, :end]

    def forward(self, query: Tensor, key_value: Optional[Tensor] = None, key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[DecoderCache] = None,
                need_weights: bool = False, key_window: Optional[KeyWindow] = None) -> tuple[Tensor, Optional[Tensor]]:
        """query (B, T, C); key_value (B, S, C) for cross-attention; key_padding_mask (B, S), True at pads.

        With ``incremental_state`` (inference only: the step stores this module's new entry in it), self-attention
        appends this step's keys/values to its ``self_attn`` entry (its padding mask, if any, then covers every
        cached position: rows that joined the batch later do not own the first ones) and cross-attention
        projects the encoder output once into its ``cross_attn`` entry and reuses it. Returns (B, T, C) and,
        when ``need_weights``, the weights (B, H, T, S)."""
        B, T, C = query.shape
        dtype = self.cache_dtype if incremental_state is not None else None  # None: the projections'
        if self.self_attention:
            qkv = self.qkv_proj(query)  # (B, T, 2 H d_k + C)
            q, k, v = self._heads(qkv if dtype is None else qkv.to(dtype), 3)  # (B, H, T, d_k|D) each
            if incremental_state is not None:
                entries = incremental_state.self_attn
                entry, k, v = self.cache_append(entries.get(self.state_key), k, v)  # (B, H, t, d_k|D)
                entries[self.state_key] = (entry if isinstance(entry, CacheEntry)  # else a plugin's dict (deprecated)
                                           else CacheEntry.from_dict(entry, type(self).__name__))
        else:
            q_rows = self.q_proj(query)  # (B, T, H d_k)
            (q,) = self._heads(q_rows if dtype is None else q_rows.to(dtype), 1)  # (B, H, T, d_k)
            cached = incremental_state.cross_attn.get(self.state_key) if incremental_state is not None else None
            if cached is not None:
                k, v = cached.k, cached.v
            else:
                if key_value is None:
                    raise ValueError("cross-attention needs key_value (the encoder output)")
                k, v = self._heads(self.kv_proj(key_value), 2)  # (B, H, S, d_k), (B, H, S, D)
                if incremental_state is not None:  # read at every step: contiguous reads are cheaper
                    k = k.to(dtype or k.dtype, memory_format=torch.contiguous_format)
                    v = v.to(dtype or v.dtype, memory_format=torch.contiguous_format)
                    incremental_state.cross_attn[self.state_key] = CacheEntry(k, v)
        group = B // k.size(0)  # query rows per key row: a sentence's beams share its encoder-side cache
        if group > 1:
            q = q.reshape(k.size(0), group, self.num_heads, T, self.key_dim).transpose(1, 2)  # (b, H, group, T, d_k)
            q = q.reshape(k.size(0), self.num_heads, group * T, self.key_dim)  # (b, H, group*T, d_k)
        if key_window is not None and self.supports_key_window and not need_weights and group == 1:
            out, weights = self._attend_in_window(q, k, v, key_padding_mask, key_window), None  # (B, H, T, D)
        else:
            out, weights = self.attend(q, k, v, key_padding_mask, self.causal, need_weights)  # (b, H, group*T, D)
        if group > 1:
            out = out.reshape(k.size(0), self.num_heads, group, T, self.head_dim).transpose(1, 2)
            if weights is not None:
                weights = weights.reshape(k.size(0), self.num_heads, group, T, -1).transpose(1, 2)
                weights = weights.reshape(B, self.num_heads, T, -1)  # (B, H, T, S)
        out = out.reshape(B, self.num_heads, T, self.head_dim).transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.out_proj(out.to(query.dtype)), weights

    def _attend_in_window(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor],
                          window: KeyWindow) -> Tensor:
        """:meth:`attend` of the rows before ``window.split`` and of those after it, each on its own keys
        (q (B,H,T,d_k), k (B,H,t,d_k), v (B,H,t,D), key_padding_mask (B,t)); returns (B,H,T,D)."""
        outs = []
        for rows, start in zip((slice(0, window.split), slice(window.split, None)), window.start):
            mask = None if key_padding_mask is None else key_padding_mask[rows, start:]
            out, _ = self.attend(q[rows], k[rows, :, start:], v[rows, :, start:], mask, self.causal, False)
            outs.append(out)
        return torch.cat(outs)

    def step_heads(self, query: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention's queries, keys (B, H, T, d_k) and values (B, H, T, D) of ``query`` (B, T, C), for
        engines to trace (nmt.engines.step), which keep the keys and values of earlier steps themselves."""
        q, k, v = self._heads(self.qkv_proj(query), 3)
        return q, k, v

    def step_output(self, out: Tensor) -> Tensor:
        """The heads' mixed values (B, H, T, D) projected back to (B, T, C)."""
        B, _, T, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, T, self.embed_dim))

    def step_attention(self, query: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
        """Self-attention of ``query`` (B, T, C) on itself as a function of tensors (the encoder's, for engines to
        trace); key_padding_mask (B, T). Returns (B, T, C)."""
        q, k, v = self.step_heads(query)
        return self.step_output(self.step_attend(q, k, v, key_padding_mask))

    def step_memory(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Encoder-decoder attention's keys (B, H, S, d_k) and values (B, H, S, D) of the encoder output
        ``memory`` (B, S, C): computed once per sentence, as the eager cache's cross-attention entry holds them."""
        k, v = self._heads(self.kv_proj(memory), 2)
        return k.contiguous(), v.contiguous()

    def step_cross_attention(self, query: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor) -> Tensor:
        """Encoder-decoder attention as a function of tensors: query (b, T, C) on the keys/values of
        :meth:`step_memory` (b, H, S, d_k|D), key_padding_mask (b, S). A sentence's beams sharing its encoder row
        come as its T queries, as :meth:`forward` groups them. Returns (b, T, C)."""
        (q,) = self._heads(self.q_proj(query), 1)  # (b, H, T, d_k)
        return self.step_output(self.step_attend(q, k, v, key_padding_mask))

    def step_attend(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
        """:meth:`attend` as engines trace it (``exportable``): the queries are the last T of the S keys. The
        default is attend() with need_weights=True, which the built-ins compute by explicit products."""
        return self.attend(q, k, v, key_padding_mask, self.causal, True)[0]

    def step_keep(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Of every key/value so far (..., t, d_k|D; any leading dimensions), those the next decoding step needs,
        as cache_append keeps them: all (the default growing cache)."""
        return k, v

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor], causal: bool,
               need_weights: bool) -> tuple[Tensor, Optional[Tensor]]:
        """q (B,H,T,d_k), k (B,H,S,d_k), v (B,H,S,D), key_padding_mask (B,S) True at pads or None
        (d_k = D unless --attention-key-dim, see ``supports_key_dim``). ``causal``:
        the T queries are the last T positions of the S keys and see no later key. Returns the
        mixed values (B,H,T,D) and, if ``need_weights``, the weights (B,H,T,S) (else None)."""
        raise NotImplementedError

    @property
    def scale(self) -> float:
        """1 / sqrt(d_k), the paper's scaling of query-key dot products."""
        return 1.0 / math.sqrt(self.key_dim)

    @property
    def dropout(self) -> float:
        """The dropout rate on the attention weights (``attention_dropout.p``), for a fused kernel's ``dropout_p``."""
        return float(self.attention_dropout.p)
