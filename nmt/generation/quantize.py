"""``--quantize int8``: dynamic int8 quantization of the models' linear layers for CPU inference.

A decoding step of a few rows reads every weight from memory and is bound by that, not by arithmetic
(docs/serving.md#measured: one beam step of one sentence on the peer model spends 2.2 of 6.4 ms in the
output projection alone). int8 weights are a quarter of the bytes: each ``nn.Linear`` becomes torch's
dynamic-quantized Linear (weights int8 per output channel, activations quantized per batch at run time),
and so does the output projection, tied to the embeddings or not (``TransformerDecoder.output_projection``).
Embeddings, LayerNorm, attention products and the softmax stay fp32. Hypotheses differ slightly from
fp32's; docs/generation.md gives the measured BLEU and speed.

It uses ``torch.ao.quantization.quantize_dynamic`` (fbgemm/x86 kernels): deprecated upstream in favour
of the torchao package but present in the torch versions nmt supports."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from nmt.errors import ConfigError
from nmt.generation.ensemble import EnsembleModel


def _quantize_dynamic(module: nn.Module) -> None:
    """In place: every nn.Linear below ``module`` becomes an int8 dynamic-quantized one, weights per channel."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():  # torch.ao's deprecation notice: the kernels are what we measured
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        quantize_dynamic(module, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True)


def quantize_int8(ens: EnsembleModel) -> EnsembleModel:
    """The ensemble's models with int8 linear layers and output projection (CPU only, fp32 models)."""
    for m in ens.models:
        if any(p.device.type != "cpu" for p in m.parameters()):
            raise ConfigError("--quantize int8: dynamic int8 quantization runs on the CPU only; leave it out on a GPU")
        decoder = m.decoder
        weight = decoder.output_weight.detach()  # (V, C), the embedding matrix itself when tied
        projection = nn.Sequential(nn.Linear(weight.size(1), weight.size(0), bias=False))
        projection[0].weight = nn.Parameter(weight.clone(), requires_grad=False)  # a copy: the embeddings stay fp32
        _quantize_dynamic(m)
        _quantize_dynamic(projection)
        decoder.output_projection = projection[0]
    return ens
