"""The configuration of the Transformer model (fairseq's flag names).

The dataclass defaults are transformer_base's values; ``--arch NAME`` applies that architecture's
preset on top of them (see :func:`arch_preset`), and YAML / flags / ``key=value`` still override it.
Attention and positional plugins are chosen by name for all roles at once (``--attention``,
``--positional``) or per role (``--encoder-attention``, ...), the per-role name winning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from nmt.config.fields import opt

GROUP = "model"


@dataclass
class ModelConfig:
    """The Transformer's shape, regularisation, and plugin choices."""

    arch: str = opt("transformer_base", "Architecture preset: fills the model options below (each can still be "
                    "overridden). Built-ins: transformer_base, transformer_big, transformer_small, transformer_tiny.",
                    group=GROUP)
    encoder_embed_dim: int = opt(512, "Encoder model dimension d_model (embeddings and every sub-layer).", group=GROUP)
    encoder_ffn_embed_dim: int = opt(2048, "Encoder position-wise feed-forward inner dimension d_ff.", group=GROUP)
    encoder_layers: int = opt(6, "Number of encoder layers.", group=GROUP)
    encoder_attention_heads: int = opt(8, "Encoder attention heads (d_model must divide by it).", group=GROUP)
    encoder_normalize_before: bool = opt(False, "Encoder pre-norm: LayerNorm before each sub-layer, plus a final "
                                         "LayerNorm after the stack (default: post-norm as in the paper).", group=GROUP)
    decoder_embed_dim: int = opt(512, "Decoder model dimension d_model.", group=GROUP)
    decoder_ffn_embed_dim: int = opt(2048, "Decoder position-wise feed-forward inner dimension d_ff.", group=GROUP)
    decoder_layers: int = opt(6, "Number of decoder layers.", group=GROUP)
    decoder_attention_heads: int = opt(8, "Decoder attention heads (self and encoder-decoder).", group=GROUP)
    decoder_normalize_before: bool = opt(False, "Decoder pre-norm (see --encoder-normalize-before).", group=GROUP)
    share_decoder_input_output_embed: bool = opt(False, "Tie the output projection to the decoder embedding.",
                                                 group=GROUP)
    share_all_embeddings: bool = opt(False, "One embedding matrix for encoder input, decoder input and output "
                                     "(needs a joined dictionary, nmt-preprocess --joined-dictionary).", group=GROUP)
    no_scale_embedding: bool = opt(False, "Do not multiply token embeddings by sqrt(d_model).", group=GROUP)
    dropout: float = opt(0.1, "Dropout on embeddings, sub-layer outputs (before the residual add).", group=GROUP)
    attention_dropout: float = opt(0.0, "Dropout on attention weights.", group=GROUP)
    activation_dropout: float = opt(0.0, "Dropout after the FFN activation.", group=GROUP)
    activation_fn: str = opt("relu", "FFN activation (the paper: relu).", choices=["relu", "gelu"], group=GROUP)
    attention: str = opt("scaled_dot_product", "Attention plugin for all three roles (encoder self, decoder self, "
                         "encoder-decoder). Built-ins: scaled_dot_product, additive, restricted.", group=GROUP)
    encoder_attention: Optional[str] = opt(None, "Attention plugin for encoder self-attention [default: --attention].",
                                           group=GROUP)
    decoder_attention: Optional[str] = opt(None, "Attention plugin for decoder self-attention [default: --attention].",
                                           group=GROUP)
    cross_attention: Optional[str] = opt(None, "Attention plugin for encoder-decoder attention "
                                         "[default: --attention].", group=GROUP)
    attention_window: int = opt(16, "restricted attention: each query sees the keys within this distance "
                                "(r previous ones in the decoder).", group=GROUP)
    positional: str = opt("sinusoidal", "Positional encoding plugin for both sides. Built-ins: sinusoidal, learned.",
                          group=GROUP)
    encoder_positional: Optional[str] = opt(None, "Positional plugin of the encoder [default: --positional].",
                                            group=GROUP)
    decoder_positional: Optional[str] = opt(None, "Positional plugin of the decoder [default: --positional].",
                                            group=GROUP)
    # The flags --max-source-positions / --max-target-positions belong to the task config (they also
    # filter the data); the training command copies them here. Set directly with model.max_*=N.
    max_source_positions: int = opt(1024, "Longest source a learned positional table holds.", cli=False)
    max_target_positions: int = opt(1024, "Longest target a learned positional table holds.", cli=False)
    decoder_start: str = opt("<s>", "Symbol the decoder's input starts with: <s> for nmt models, </s> for models "
                             "imported from fairseq (nmt-import-fairseq sets it).", cli=False)

    def attention_for(self, role: str) -> str:
        """The attention plugin name of ``role`` ("encoder", "decoder" or "cross")."""
        return getattr(self, f"{role}_attention") or self.attention

    def positional_for(self, side: str) -> str:
        """The positional plugin name of ``side`` ("encoder" or "decoder")."""
        return getattr(self, f"{side}_positional") or self.positional


def arch_preset(cfg: Any) -> dict[str, Any] | None:
    """The ``--arch`` preset layer for ``nmt.config.loader.resolve_config(preset=arch_preset)``.

    Looks up ``cfg.model.arch`` in the arch registry; the registered function returns the model
    values it sets. Returns ``{"model": {...}}`` (or None when the config has no model)."""
    from nmt.registry import ARCH

    model = cfg.get("model") if hasattr(cfg, "get") else getattr(cfg, "model", None)
    if model is None:
        return None
    values = ARCH.get(model.arch)()
    return {"model": {**values, "arch": model.arch}}
