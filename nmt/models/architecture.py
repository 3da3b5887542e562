"""The architecture seam (``--arch``): a named model. An architecture presets model options
(its ``preset``, merged above the dataclass defaults and below YAML, flags and ``key=value``)
and builds the model from the resolved model config and the dictionaries.

The built-in architectures are Transformers of different shapes and all build with
:func:`nmt.models.build.build_transformer`; an architecture of your own may build another
``nn.Module`` with the same interface (``nmt.models.transformer.TransformerModel``'s methods)."""

from __future__ import annotations

from typing import Any, ClassVar, Generic

from torch import nn

from nmt.config.model import ModelConfig
from nmt.models.build import ModelVocabulary, build_transformer
from nmt.registry import OptionsT


class Architecture(Generic[OptionsT]):
    """Base class of ``--arch`` plugins; constructed as ``cls(cfg)`` with its own options (the type argument:
    ``Architecture[NoOptions]``)."""

    preset: ClassVar[dict[str, Any]] = {}  # model config values it sets, e.g. {"encoder_layers": 3, ...}

    def __init__(self, cfg: OptionsT):
        self.cfg = cfg

    def build_model(self, model_cfg: ModelConfig, src_dict: ModelVocabulary, tgt_dict: ModelVocabulary) -> nn.Module:
        """The model for ``model_cfg`` (its arch preset already applied) and the dictionaries."""
        return build_transformer(model_cfg, src_dict, tgt_dict)
