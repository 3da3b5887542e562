"""The Transformer and the base classes of its attention and positional plugins."""

from nmt.models.attention import AttentionBase
from nmt.models.build import build_model
from nmt.models.positional import PositionalBase
from nmt.models.transformer import EncoderOut, TransformerModel

__all__ = ["AttentionBase", "PositionalBase", "EncoderOut", "TransformerModel", "build_model"]
