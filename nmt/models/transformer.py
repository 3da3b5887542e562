"""The encoder-decoder Transformer (Vaswani et al., 2017). Modules are built by
:func:`nmt.models.build.build_model`, which chooses the attention and positional plugins."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.models.decoder_cache import DecoderCache, key_window
from nmt.models.layers import DecoderLayer, EncoderLayer
from nmt.models.positional import PositionalBase

if TYPE_CHECKING:
    from nmt.config.model import ModelConfig


class EncoderOut(NamedTuple):
    """What the decoder needs from the encoder, computed once per sentence."""

    out: Tensor  # (B, S, C)
    padding_mask: Optional[Tensor]  # (B, S) True at pads; None when the batch has no padding
    attn: Optional[list[Tensor]] = None  # per layer (B, H, S, S), only when weights were asked for


def padding_mask(tokens: Tensor, pad: int) -> Optional[Tensor]:
    """(B, L) True at pads, or None when there is none (lets attention use its unmasked fast path)."""
    mask = tokens.eq(pad)
    return mask if bool(mask.any()) else None


class Embedder(nn.Module):
    """Token embedding * sqrt(d) (unless disabled) + positional encoding, then dropout. In training, ``word_dropout``
    zeroes the whole embedding of a token with that probability (its position stays), the others scaled up to
    keep the expectation: the model learns to translate around words it did not see."""

    def __init__(self, embed_tokens: nn.Embedding, positional: PositionalBase, dropout: float, scale: bool,
                 word_dropout: float):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.positional = positional
        self.scale = math.sqrt(embed_tokens.embedding_dim) if scale else 1.0
        self.dropout = nn.Dropout(dropout)
        self.word_dropout = nn.Dropout(word_dropout)  # applied to a (B, L, 1) mask: one draw per token

    def forward(self, tokens: Tensor, offset: int = 0, positions: Optional[Tensor] = None) -> Tensor:
        """tokens (B, L) at positions ``offset ..``, or, for one token per row (L = 1), at each
        row's own position ``positions`` (B,)."""
        x = self.embed_tokens(tokens) * self.scale  # (B, L, C)
        if self.training and self.word_dropout.p > 0:
            x = x * self.word_dropout(x.new_ones(*tokens.shape, 1))
        if positions is None:
            x = x + self.positional(tokens.size(1), offset).to(x.dtype)  # (L, C) broadcast over B
        else:
            x = x + self.positional.at(positions).to(x.dtype).unsqueeze(1)  # (B, 1, C)
        return self.dropout(x)


class TransformerEncoder(nn.Module):
    def __init__(self, embedder: Embedder, layers: list[EncoderLayer], final_norm: Optional[nn.LayerNorm], pad: int):
        super().__init__()
        self.embedder = embedder
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm  # pre-norm only: the stack's output is otherwise unnormalised
        self.pad = pad

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.embedder.embed_tokens

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None,
                need_weights: bool = False) -> EncoderOut:
        """src_tokens (B, S), right-padded. ``src_lengths`` is accepted for the common call
        signature; the padding mask is read from the tokens."""
        mask = padding_mask(src_tokens, self.pad)
        x = self.embedder(src_tokens)  # (B, S, C)
        attn: Optional[list[Tensor]] = [] if need_weights else None
        for layer in self.layers:
            x, w = layer(x, mask, need_weights)
            if attn is not None:
                attn.append(w)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return EncoderOut(x, mask, attn)


class TransformerDecoder(nn.Module):
    def __init__(self, embedder: Embedder, layers: list[DecoderLayer], final_norm: Optional[nn.LayerNorm],
                 output_weight: nn.Parameter):
        super().__init__()
        self.embedder = embedder
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm
        self.output_weight = output_weight  # (V, C); the embedding's own Parameter when tied
        # replaces the product with output_weight when set: a quantized or packed copy of the matrix for inference
        # (nmt.generation.quantize, nmt.cpu_speed), or the same product on the CPU's terms (nmt.cpu_speed), which
        # holds output_weight itself as its ``weight``
        self.output_projection: Optional[nn.Module] = None

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.embedder.embed_tokens

    def output_layer(self, features: Tensor) -> Tensor:
        """(..., C) features -> (..., V) logits; any leading shape (e.g. only non-pad positions)."""
        if self.output_projection is not None:
            return self.output_projection(features)
        return F.linear(features, self.output_weight)

    def forward(self, prev_output_tokens: Tensor, encoder_out: EncoderOut,
                incremental_state: Optional[DecoderCache] = None, features_only: bool = False,
                need_weights: bool = False):
        """prev_output_tokens (B, T). With ``incremental_state`` (a :class:`DecoderCache`, which the step
        extends) only the last position is computed (the earlier ones are in the cache) and the result is
        (B, 1, ...). When the cache holds rows that started at different steps (its ``left_pads``), the tokens are
        right-aligned and each row's leading pads are masked and not counted as positions.

        Returns logits (B, T, V), or features (B, T, C) with ``features_only``; with
        ``need_weights`` a pair (that, {"self": [per layer (B,H,T,T)], "cross": [(B,H,T,S)]})."""
        offset, positions, self_mask, window = 0, None, None, None
        if incremental_state is not None:
            if not isinstance(incremental_state, DecoderCache):
                raise TypeError("incremental_state: pass a DecoderCache (model.new_incremental_state()), "
                                f"not a {type(incremental_state).__name__}")
            offset = prev_output_tokens.size(1) - 1
            prev_output_tokens = prev_output_tokens[:, -1:]  # (B, 1)
            pads = incremental_state.left_pads  # (B,) or None
            if pads is not None:
                positions = offset - pads  # (B,)
                self_mask = torch.arange(offset + 1, device=pads.device)[None, :] < pads[:, None]  # (B, t)
                if not need_weights and not torch.compiler.is_compiling():  # (compiled: no data-dependent split)
                    window = key_window(pads, offset + 1)
        x = self.embedder(prev_output_tokens, offset, positions)  # (B, T, C)
        self_attn: list[Tensor] = []
        cross_attn: list[Tensor] = []
        for layer in self.layers:
            x, self_w, cross_w = layer(x, encoder_out.out, encoder_out.padding_mask, incremental_state, need_weights,
                                       self_mask, window)
            if need_weights:
                self_attn.append(self_w)
                cross_attn.append(cross_w)
        if self.final_norm is not None:
            x = self.final_norm(x)
        out = x if features_only else self.output_layer(x)  # (B, T, C) or (B, T, V)
        return (out, {"self": self_attn, "cross": cross_attn}) if need_weights else out


class TransformerModel(nn.Module):
    """Encoder + decoder; ``model(src_tokens, src_lengths, prev_output_tokens) -> logits (B, T, V)``."""

    def __init__(self, encoder: TransformerEncoder, decoder: TransformerDecoder, plugins: dict[str, str],
                 cfg: ModelConfig):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self._plugins = dict(plugins)
        self.cfg = cfg  # the ModelConfig it was built from
        # Longest inputs it is meant for (searches cap output length with the target one).
        self.max_source_positions: int = cfg.max_source_positions
        self.max_target_positions: int = cfg.max_target_positions

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor], prev_output_tokens: Tensor,
                features_only: bool = False) -> Tensor:
        enc = self.encoder(src_tokens, src_lengths)
        return self.decoder(prev_output_tokens, enc, features_only=features_only)

    def output_layer(self, features: Tensor) -> Tensor:
        """Project decoder features (..., C) to vocabulary logits (..., V)."""
        return self.decoder.output_layer(features)

    def output_matrix(self) -> Optional[Tensor]:
        """(V, C): ``output_layer(x)`` is ``x @ output_matrix().T``, so a criterion may do that product itself
        (nmt.training.criterion); None while a projection of another matrix (quantized, packed) replaces it."""
        weight, projection = self.decoder.output_weight, self.decoder.output_projection
        return weight if projection is None or getattr(projection, "weight", None) is weight else None

    def plugin_names(self) -> dict[str, str]:
        """role -> plugin name (encoder/decoder/cross attention, encoder/decoder positional)."""
        return dict(self._plugins)

    def attention_weights(self, src_tokens: Tensor, src_lengths: Optional[Tensor],
                          prev_output_tokens: Tensor) -> dict[str, list[Tensor]]:
        """Every layer's weights per head: {"encoder": [(B,H,S,S)], "self": [(B,H,T,T)], "cross": [(B,H,T,S)]}."""
        enc = self.encoder(src_tokens, src_lengths, need_weights=True)
        _, weights = self.decoder(prev_output_tokens, enc, features_only=True, need_weights=True)
        return {"encoder": enc.attn, **weights}

    @staticmethod
    def reorder_encoder_out(encoder_out: EncoderOut, new_order: Tensor) -> EncoderOut:
        """Rows of the batch in ``new_order`` (e.g. each sentence repeated beam-size times)."""
        mask = encoder_out.padding_mask
        return EncoderOut(encoder_out.out.index_select(0, new_order),
                          None if mask is None else mask.index_select(0, new_order))

    @staticmethod
    def merge_encoder_out(a: EncoderOut, b: EncoderOut) -> EncoderOut:
        """The rows of ``a`` then those of ``b``, the shorter source right-padded (and masked)."""
        length = max(a.out.size(1), b.out.size(1))

        def padded(e: EncoderOut) -> tuple[Tensor, Tensor]:
            B, S, _ = e.out.shape
            mask = e.padding_mask if e.padding_mask is not None else e.out.new_zeros((B, S), dtype=torch.bool)
            return F.pad(e.out, (0, 0, 0, length - S)), F.pad(mask, (0, length - S), value=True)

        (out_a, mask_a), (out_b, mask_b) = padded(a), padded(b)
        mask = torch.cat([mask_a, mask_b])
        return EncoderOut(torch.cat([out_a, out_b]), mask if bool(mask.any()) else None)

    @staticmethod
    def new_incremental_state() -> DecoderCache:
        """An empty cache for :meth:`TransformerDecoder.forward` to fill while generating."""
        return DecoderCache()

    @staticmethod
    def reorder_incremental_state(incremental_state: DecoderCache, new_order: Tensor, drop_left: int = 0) -> None:
        """In place, as fairseq's models do: the cache's row b becomes its row ``new_order[b]``, without the first
        ``drop_left`` positions (``DecoderCache.reorder`` gives a new cache instead, as the searches use it)."""
        incremental_state.assign(incremental_state.reorder(new_order, drop_left=drop_left))
