"""The configuration of the Transformer model (fairseq's flag names).

The dataclass defaults are transformer_base's values; ``--arch NAME`` applies that architecture's
preset on top of them (see :func:`arch_preset`), and YAML / flags / ``key=value`` still override it.

Attention is a plugin group per site: ``attention`` is every site's default (``--attention
restricted --attention-window 8``), and ``encoder_attention`` / ``decoder_attention`` /
``cross_attention`` may name another plugin or override options for one site
(``--decoder-attention-window 4``). Positional encodings work the same way per side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Optional

from nmt.fields import inherited_group, opt, plugin_group

if TYPE_CHECKING:
    from omegaconf import DictConfig

GROUP = "model"
ATTENTION_SITES = ("encoder", "decoder", "cross")  # encoder self, decoder self, encoder-decoder
POSITIONAL_SIDES = ("encoder", "decoder")


def _site(kind: str, site: str, what: str) -> Any:
    return plugin_group(kind, None, f"{what}.", group=GROUP,
                        inherit=kind, option_prefix=f"{site}-")


@dataclass
class ModelConfig:
    """The Transformer's shape, regularisation, and plugin choices."""

    arch: Dict[str, Any] = plugin_group("arch", "transformer_base", "Architecture: presets the model options below "
                                        "(each can still be overridden) and builds the model.", group=GROUP)
    encoder_embed_dim: int = opt(512, "Encoder model dimension d_model (embeddings and every sub-layer).", low=1,
                                 group=GROUP)
    encoder_ffn_embed_dim: int = opt(2048, "Encoder position-wise feed-forward inner dimension d_ff.", low=1,
                                     group=GROUP)
    encoder_layers: int = opt(6, "Number of encoder layers.", low=1, high=1000, group=GROUP)
    encoder_attention_heads: int = opt(8, "Encoder attention heads (d_model must divide by it).", low=1, group=GROUP)
    encoder_normalize_before: bool = opt(False, "Encoder pre-norm: LayerNorm before each sub-layer, plus a final "
                                         "LayerNorm after the stack (default: post-norm as in the paper).", group=GROUP)
    decoder_embed_dim: int = opt(512, "Decoder model dimension d_model.", low=1, group=GROUP)
    decoder_ffn_embed_dim: int = opt(2048, "Decoder position-wise feed-forward inner dimension d_ff.", low=1,
                                     group=GROUP)
    decoder_layers: int = opt(6, "Number of decoder layers.", low=1, high=1000, group=GROUP)
    decoder_attention_heads: int = opt(8, "Decoder attention heads (self and encoder-decoder).", low=1, group=GROUP)
    decoder_normalize_before: bool = opt(False, "Decoder pre-norm (see --encoder-normalize-before).", group=GROUP)
    share_decoder_input_output_embed: bool = opt(False, "Tie the output projection to the decoder embedding.",
                                                 group=GROUP)
    share_all_embeddings: bool = opt(False, "One embedding matrix for encoder input, decoder input and output "
                                     "(needs a joined dictionary, nmt-preprocess --joined-dictionary).", group=GROUP)
    no_scale_embedding: bool = opt(False, "Do not multiply token embeddings by sqrt(d_model).", group=GROUP)
    dropout: float = opt(0.1, "Dropout on embeddings, sub-layer outputs (before the residual add).", low=0, high=1,
                         high_open=True, group=GROUP)
    dropout_final: Optional[float] = opt(None, "Training: raise --dropout linearly to this rate between the epochs of "
                                         "--dropout-rise-epochs, for a model that will see the data many times "
                                         "(docs/training.md); default: --dropout throughout.", low=0, high=1,
                                         high_open=True, group=GROUP)
    dropout_rise_epochs: str = opt("10,30", "A,B: with --dropout-final, the rate is --dropout up to epoch A and "
                                   "--dropout-final from epoch B on, linear between.", group=GROUP)
    attention_dropout: float = opt(0.0, "Dropout on attention weights.", low=0, high=1, high_open=True, group=GROUP)
    attention_key_dim: Optional[int] = opt(None, "Per-head size d_k of attention queries and keys (Table 3 row B); "
                                           "values keep d_model / heads. Default: d_model / heads.", low=1,
                                           group=GROUP)
    activation_dropout: float = opt(0.0, "Dropout after the FFN activation.", low=0, high=1, high_open=True,
                                    group=GROUP)
    word_dropout: float = opt(0.0, "Training: zero a whole input token's embedding (source and previous target "
                              "tokens alike) with this probability, the rest scaled by 1 / (1 - p); a regularizer "
                              "for small data (Sennrich et al. 2016 dropped entire words).", low=0, high=1,
                              high_open=True, group=GROUP)
    activation_fn: str = opt("relu", "FFN activation (the paper: relu).", choices=["relu", "gelu"], group=GROUP)
    attention: Dict[str, Any] = plugin_group("attention", "scaled_dot_product", "Attention for every site (encoder "
                                             "self, decoder self, encoder-decoder) unless a site names its own.",
                                             group=GROUP)
    encoder_attention: Dict[str, Any] = _site("attention", "encoder", "Attention of the encoder's self-attention")
    decoder_attention: Dict[str, Any] = _site("attention", "decoder", "Attention of the decoder's self-attention")
    cross_attention: Dict[str, Any] = _site("attention", "cross", "Attention of the encoder-decoder attention "
                                            "(a self-attention-only --attention leaves it on scaled_dot_product)")
    positional: Dict[str, Any] = plugin_group("positional", "sinusoidal", "Positional encoding of both sides.",
                                              group=GROUP)
    encoder_positional: Dict[str, Any] = _site("positional", "encoder", "Positional encoding of the encoder")
    decoder_positional: Dict[str, Any] = _site("positional", "decoder", "Positional encoding of the decoder")
    max_source_positions: int = opt(1024, "Longest source sentence (tokens, eos included): longer ones are not "
                                    "trained on (or are refused when translating), and a learned positional table "
                                    "holds this many.", low=1, high=1 << 20, group=GROUP)
    max_target_positions: int = opt(1024, "Longest target sentence (tokens, eos included), as "
                                    "--max-source-positions; also caps the output length when translating.", low=1,
                                    high=1 << 20, group=GROUP)
    decoder_start: str = opt("<s>", "Symbol the decoder's input starts with: <s> for nmt models, </s> for models "
                             "imported from fairseq (nmt-import-fairseq sets it).", choices=["<s>", "</s>"], cli=False)

    def attention_for(self, site: str) -> dict[str, Any]:
        """The attention plugin group (name and options) of ``site`` ("encoder", "decoder" or "cross")."""
        return inherited_group(getattr(self, f"{site}_attention"), self.attention)

    def positional_for(self, side: str) -> dict[str, Any]:
        """The positional plugin group of ``side`` ("encoder" or "decoder")."""
        return inherited_group(getattr(self, f"{side}_positional"), self.positional)


def arch_preset(cfg: DictConfig) -> Optional[dict[str, Any]]:
    """The ``--arch`` preset layer for ``nmt.config.loader.resolve_config(preset=arch_preset)``:
    ``{"model": {...}}`` with the values the architecture sets (None when the config has no model)."""
    from nmt.registry import ARCH

    model = cfg.get("model")
    if model is None:
        return None
    arch = model.arch if isinstance(model.arch, str) else model.arch["name"]
    return {"model": dict(ARCH.get(arch).preset)}
