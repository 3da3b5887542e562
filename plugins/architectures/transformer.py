"""The Transformer architectures by name (--arch). Each presets the model's shape; the config
loader merges it above the dataclass defaults and below YAML, flags and key=value."""

from __future__ import annotations

from typing import Any

from nmt.models.architecture import Architecture
from nmt.registry import NoOptions, register_arch


def _shape(dim: int, ffn: int, layers: int, heads: int, dropout: float) -> dict[str, Any]:
    """The same shape on both sides."""
    return {
        "encoder_embed_dim": dim, "encoder_ffn_embed_dim": ffn, "encoder_layers": layers,
        "encoder_attention_heads": heads,
        "decoder_embed_dim": dim, "decoder_ffn_embed_dim": ffn, "decoder_layers": layers,
        "decoder_attention_heads": heads,
        "dropout": dropout,
    }


@register_arch("transformer_base")
class TransformerBase(Architecture[NoOptions]):
    """The paper's base model: d_model 512, 6+6 layers, 8 heads, d_ff 2048, dropout 0.1."""

    preset = _shape(512, 2048, 6, 8, 0.1)


@register_arch("transformer_big")
class TransformerBig(Architecture[NoOptions]):
    """The paper's big model: d_model 1024, 6+6 layers, 16 heads, d_ff 4096, dropout 0.3."""

    preset = _shape(1024, 4096, 6, 16, 0.3)


@register_arch("transformer_small")
class TransformerSmall(Architecture[NoOptions]):
    """fairseq's IWSLT shape (transformer_iwslt_de_en): d_model 512, 6+6 layers, 4 heads, d_ff 1024;
    dropout 0.3 as in fairseq's IWSLT'14 recipe."""

    preset = _shape(512, 1024, 6, 4, 0.3)


@register_arch("transformer_tiny")
class TransformerTiny(Architecture[NoOptions]):
    """For tests and CPU demos: d_model 64, 2+2 layers, 4 heads, d_ff 256."""

    preset = _shape(64, 256, 2, 4, 0.1)
