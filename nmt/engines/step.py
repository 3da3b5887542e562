"""The decoder as a function of tensors: ``step(tokens, encoder_out, cache) -> (log_probs, cache)``, the form an
engine can trace (torch.onnx.export, torch.export) and run without Python between operators.

The eager decoder (nmt.models.transformer) keeps its cache in a DecoderCache that it fills in place and that may
hold rows started at different steps; here the cache is the step's inputs and outputs, one flat list of tensors.
Rows that started at different steps (a search that refills finished rows merges them) are right-aligned as in the
eager cache: a row at position p of a cache of t positions owns its last p of them, and the step masks the t - p
before (:func:`masks_left_pads`: every self-attention keeps the growing cache). The arithmetic is the eager
decoder's (the attention plugins' ``step_attend`` and ``step_keep``, nmt.models.attention), so
:class:`DecoderStep` gives the eager decoder's log-probabilities and is the reference every engine is tested
against.

The two traced modules and their flat signatures (``encoder_names`` / ``step_names`` give the names; L decoder
layers, H heads, d_k the query/key size per head, D = d_model / H the value size). Decoder rows come grouped by
their encoder row: b encoder rows (sentences), G decoder rows each (a sentence's beams sharing its encoder row;
G = 1 in greedy search, or when every row has an encoder row of its own), so B = b * G decoder rows in all. Every
size named here is dynamic.

:class:`EncoderForExport` ``(src_tokens) -> (encoder_out, encoder_padding, cross_k_0, cross_v_0, ..)``
    src_tokens (b, S) int64, right-padded with the dictionary's pad;
    encoder_out (b, S, C) float32; encoder_padding (b, S) bool, True at pads;
    cross_k_i (b, H, S, d_k), cross_v_i (b, H, S, D): layer i's encoder-decoder keys and values, computed once.

:class:`DecoderStep` ``(tokens, positions, encoder_padding, self_k_0, self_v_0, cross_k_0, cross_v_0, ..)
-> (log_probs, new_self_k_0, new_self_v_0, ..)``
    tokens (b, G) int64, the last token of each row; positions (b, G) int64, its position (0 at the first step;
    less than t for a row that joined later, whose first t - position cached keys are masked);
    encoder_padding (b, S) bool; self_k_i (b, G, H, t, d_k), self_v_i (b, G, H, t, D): layer i's self-attention
    keys and values of the earlier steps (t = 0 at the first step); cross_k_i, cross_v_i as the encoder gave them;
    log_probs (b, G, V) float32; new_self_k_i (b, G, H, t', d_k), new_self_v_i (b, G, H, t', D): the keys and
    values the next step takes, t' = t + 1, or fewer for a plugin that keeps a window (restricted attention: the
    last r + 1).

A search's (B, ...) tensors are views of these: tokens (B, 1) -> (b, G), a cache (B, H, t, d) -> (b, G, H, t, d)
(:func:`grouped`). The encoder output itself is not a step input: the cross keys and values are all the step
reads of it.
"""

from __future__ import annotations

from typing import Optional, Sequence, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.errors import UsageError
from nmt.models.attention import AttentionBase
from nmt.models.decoder_cache import CacheEntry, DecoderCache
from nmt.models.layers import DecoderLayer, EncoderLayer
from nmt.models.positional import PositionalBase
from nmt.models.transformer import Embedder, TransformerModel

ENCODER_INPUTS = ("src_tokens",)
STEP_INPUTS_FIXED = ("tokens", "positions", "encoder_padding")


def encoder_names(layers: int) -> tuple[list[str], list[str]]:
    """The encoder's input and output names, in order."""
    cross = [f"cross_{kv}_{i}" for i in range(layers) for kv in "kv"]
    return list(ENCODER_INPUTS), ["encoder_out", "encoder_padding", *cross]


def step_names(layers: int) -> tuple[list[str], list[str]]:
    """The decoder step's input and output names, in order (per layer: self_k, self_v, cross_k, cross_v in;
    new_self_k, new_self_v out)."""
    cache = [f"{kind}_{kv}_{i}" for i in range(layers) for kind in ("self", "cross") for kv in "kv"]
    new = [f"new_self_{kv}_{i}" for i in range(layers) for kv in "kv"]
    return [*STEP_INPUTS_FIXED, *cache], ["log_probs", *new]


def position_table(positional: PositionalBase) -> Tensor:
    """(max_positions, C) encodings of every position the model takes: a traced graph reads rows of it instead
    of asking the plugin for the rows its inputs need (the plugin's sizes would be fixed at tracing)."""
    return positional(positional.max_positions, 0)


def embed(embedder: Embedder, tokens: Tensor, positions: Tensor) -> Tensor:
    """Scaled token embeddings plus the encodings of ``positions`` (broadcastable to tokens (B, L)): (B, L, C)."""
    x = embedder.embed_tokens(tokens) * embedder.scale  # (B, L, C)
    return embedder.dropout(x + position_table(embedder.positional)[positions].to(x.dtype))


def encoder_layers(model: TransformerModel) -> list[EncoderLayer]:
    return cast(list[EncoderLayer], list(model.encoder.layers))


def decoder_layers(model: TransformerModel) -> list[DecoderLayer]:
    return cast(list[DecoderLayer], list(model.decoder.layers))


def attention_modules(model: TransformerModel) -> list[tuple[str, AttentionBase]]:
    """Every attention module of the model with the role it plays (encoder, decoder, cross)."""
    found: list[tuple[str, AttentionBase]] = []
    for layer in encoder_layers(model):
        found.append(("encoder", layer.self_attn))
    for dec in decoder_layers(model):
        found += [("decoder", dec.self_attn), ("cross", dec.cross_attn)]
    return found


def check_exportable(model: nn.Module) -> TransformerModel:
    """The model, if engines can trace it; else a one-line UsageError naming what cannot be and what to do."""
    if not isinstance(model, TransformerModel):
        raise UsageError(f"--with onnx/compiled: the model is a {type(model).__name__}, not nmt's Transformer "
                         "(nmt.models.transformer.TransformerModel); export it with --with ctranslate2 or translate "
                         "with --engine torch")
    plugins = model.plugin_names()
    for role, attn in attention_modules(model):
        if not attn.exportable:
            name = plugins.get(f"{role}_attention", type(attn).__name__)
            raise UsageError(f"--with onnx/compiled: the {role} attention plugin '{name}' "
                             f"({type(attn).__module__}.{type(attn).__name__}) cannot be exported: implement its "
                             "step_attend() (and step_keep() if it keeps a cache of its own) as tensor arithmetic "
                             "and set exportable = True (nmt.models.attention.AttentionBase), or translate with "
                             "--engine torch")
    if model.output_matrix() is None:
        raise UsageError("--with onnx/compiled: the model's output projection is quantized or packed; export the "
                         "fp32 checkpoint as it was saved")
    return model


def masks_left_pads(model: TransformerModel) -> bool:
    """Whether the step reads rows that started at different steps (left pads, from each row's position): every
    decoder self-attention keeps the growing cache, which a merge can right-align (restricted attention keeps a
    window of its own, as the eager decoder's merge rule says: nmt.generation.ensemble)."""
    return all(type(attn).step_keep is AttentionBase.step_keep and type(attn).cache_append is AttentionBase.cache_append
               for role, attn in attention_modules(model) if role == "decoder")


def shares_encoder_rows(model: TransformerModel) -> bool:
    """Whether a sentence's beams may share its encoder row in the step (nmt.generation.ensemble's rule: every
    encoder-decoder attention's queries are independent)."""
    return all(attn.independent_queries for role, attn in attention_modules(model) if role == "cross")


class EncoderForExport(nn.Module):
    """The encoder, then every decoder layer's cross-attention keys and values (module docstring). Unlike the
    eager encoder it always builds the padding mask (its fast path for a batch without pads is a decision on
    values, which tracing would fix)."""

    def __init__(self, model: TransformerModel):
        super().__init__()
        self.model = check_exportable(model)
        self.eval()  # inference only (exporters put a module back in its own mode: this one's, not the model's)

    def forward(self, src_tokens: Tensor) -> tuple[Tensor, ...]:
        encoder = self.model.encoder
        padding = src_tokens.eq(encoder.pad)  # (b, S)
        positions = torch.arange(src_tokens.size(1), device=src_tokens.device)  # (S,)
        x = embed(encoder.embedder, src_tokens, positions)  # (b, S, C)
        for layer in encoder_layers(self.model):
            x = layer.attn_res.post(x, layer.self_attn.step_attention(layer.attn_res.pre(x), padding))
            x = layer.ffn_res.post(x, layer.ffn(layer.ffn_res.pre(x)))  # (b, S, C)
        if encoder.final_norm is not None:
            x = encoder.final_norm(x)
        cross: list[Tensor] = []
        for dec in decoder_layers(self.model):
            cross.extend(dec.cross_attn.step_memory(x))  # (b, H, S, d_k), (b, H, S, D)
        return (x, padding, *cross)


class DecoderStep(nn.Module):
    """One decoding step of every row (module docstring): ``(tokens, positions, encoder_padding, *cache) ->
    (log_probs, *new_self_cache)``."""

    def __init__(self, model: TransformerModel):
        super().__init__()
        self.model = check_exportable(model)
        self.layers = len(model.decoder.layers)
        self.masks_left_pads = masks_left_pads(model)
        self.eval()  # inference only (exporters put a module back in its own mode: this one's, not the model's)

    def forward(self, tokens: Tensor, positions: Tensor, encoder_padding: Tensor, *cache: Tensor
                ) -> tuple[Tensor, ...]:
        decoder = self.model.decoder
        b, G = tokens.shape
        x = embed(decoder.embedder, tokens, positions)  # (b, G, C)
        C = x.size(2)
        own_from = None  # (B, t + 1) True at the cached keys a row does not own (it joined later)
        if self.masks_left_pads:
            t = cache[0].size(3)
            start = (t - positions).reshape(b * G, 1)  # (B, 1): the row's first own key
            own_from = torch.arange(t + 1, device=tokens.device).unsqueeze(0) < start
        new: list[Tensor] = []
        for i, layer in enumerate(decoder_layers(self.model)):
            self_k, self_v, cross_k, cross_v = cache[4 * i:4 * i + 4]
            # self-attention: each of the b * G rows one query on its own keys. The cache is joined in its own
            # shape: a reshape to a shape holding t = 0 (the first step) would read as "keep that axis" in ONNX
            attn = layer.self_attn
            q, k, v = attn.step_heads(layer.self_res.pre(x).reshape(b * G, 1, C))  # (B, H, 1, d_k|D)
            k = torch.cat([self_k, k.unflatten(0, (b, G))], dim=3)  # (b, G, H, t + 1, d_k)
            v = torch.cat([self_v, v.unflatten(0, (b, G))], dim=3)  # (b, G, H, t + 1, D)
            y = attn.step_output(attn.step_attend(q, k.flatten(0, 1), v.flatten(0, 1), own_from))  # (B, 1, C)
            x = layer.self_res.post(x, y.reshape(b, G, C))
            # encoder-decoder attention: a sentence's G rows are G queries of its encoder row
            y = layer.cross_attn.step_cross_attention(layer.cross_res.pre(x), cross_k, cross_v, encoder_padding)
            x = layer.cross_res.post(x, y)
            x = layer.ffn_res.post(x, layer.ffn(layer.ffn_res.pre(x)))  # (b, G, C)
            new += attn.step_keep(k, v)  # (b, G, H, t', d_k|D)
        if decoder.final_norm is not None:
            x = decoder.final_norm(x)
        logits = decoder.output_layer(x)  # (b, G, V)
        return (F.log_softmax(logits.float(), dim=-1), *new)


def grouped(x: Tensor, b: int) -> Tensor:
    """A search's (B, ...) tensor as the step takes it, (b, B / b, ...): a view (rows of one encoder row are
    consecutive)."""
    return x.view(b, x.size(0) // b, *x.shape[1:])


def self_key(layer: int) -> str:
    """The DecoderCache slot of decoder layer ``layer``'s self-attention keys and values."""
    return f"self.{layer}"


def flatten(cache: DecoderCache, cross: Sequence[Tensor], rows: int) -> list[Tensor]:
    """The step's cache inputs from a DecoderCache of earlier steps (:func:`unflatten`'s, rows (B, H, t, d);
    empty before the first step) and the encoder's cross keys/values ``cross`` (per layer k, v; b rows): per layer
    self_k, self_v (b, G, H, t, d), cross_k, cross_v; ``rows`` decoder rows (B = b * G). The cache has no room
    (``DecoderCache(room=False)``): every entry is filled to its end."""
    flat: list[Tensor] = []
    for i in range(len(cross) // 2):
        cross_k, cross_v = cross[2 * i], cross[2 * i + 1]
        b, H = cross_k.shape[:2]
        entry = cache.self_attn.get(self_key(i))
        if entry is None:  # the first step: no earlier keys
            flat += [cross_k.new_zeros(b, rows // b, H, 0, cross_k.size(3)),
                     cross_v.new_zeros(b, rows // b, H, 0, cross_v.size(3))]
        else:
            flat += [grouped(entry.k, b), grouped(entry.v, b)]
        flat += [cross_k, cross_v]
    return flat


def unflatten(new_self: Sequence[Tensor], left_pads: Optional[Tensor] = None) -> DecoderCache:
    """A DecoderCache holding the step's new self-attention keys and values (per layer k, v; (b, G, H, t', d)) as
    (B, H, t', d) rows, every position filled (growing entries without room: a cache whose rows a search reorders
    and merges as it does the eager one's), with the rows' ``left_pads`` (B,) kept."""
    entries = {}
    for i in range(len(new_self) // 2):
        k, v = new_self[2 * i].flatten(0, 1), new_self[2 * i + 1].flatten(0, 1)
        entries[self_key(i)] = CacheEntry(k, v, k.size(2))
    return DecoderCache(entries, left_pads=left_pads, room=False)
