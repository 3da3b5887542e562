"""``--quantize int8|fp16``: dynamic quantization of the models' linear layers for CPU inference.

A decoding step of a few rows spends most of its time in the linear layers and the output projection,
and torch's fp32 product is slow for so few rows: 5 rows against the peer model's 9,808 x 256 output
matrix took 0.70 ms on a 2-core EPYC, where reading that matrix once took 0.08 ms, and ran at a quarter of
the arithmetic rate of 640 rows (``benchmarks/small_products.py``). fbgemm's dynamic-quantized Linear keeps
its weights packed once, in fewer bytes:

- ``int8``: weights int8 per output channel, activations quantized per batch at run time. The fastest;
  hypotheses differ from fp32's for about one sentence in six (docs/generation.md).
- ``fp16``: weights in float16, activations and accumulation in fp32. Nearly fp32's hypotheses (998/1000
  on the peer model) at int8's speed for a few rows; no faster than fp32 for large batches.

Every ``nn.Linear`` becomes torch's dynamic-quantized Linear, and so does the output projection, tied to the
embeddings or not (``TransformerDecoder.output_projection``). Embeddings, LayerNorm, attention products and
the softmax stay fp32.

It uses ``torch.ao.quantization.quantize_dynamic`` (fbgemm/x86 kernels): deprecated upstream in favour
of the torchao package but present in the torch versions nmt supports."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from nmt.errors import ConfigError
from nmt.generation.ensemble import EnsembleModel

# the weight types --quantize offers: torch.ao's qconfig name and weight dtype for each
KINDS = {"int8": ("per_channel_dynamic_qconfig", torch.qint8), "fp16": ("float16_dynamic_qconfig", torch.float16)}


def quantize_linear_layers(module: nn.Module, kind: str) -> None:
    """In place: every nn.Linear below ``module`` becomes a dynamic-quantized one with ``kind`` weights."""
    from torch.ao import quantization

    qconfig_name, dtype = KINDS[kind]
    with warnings.catch_warnings():  # torch.ao's deprecation notice: the kernels are what we measured
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        quantization.quantize_dynamic(module, {nn.Linear: getattr(quantization, qconfig_name)}, dtype=dtype,
                                      inplace=True)


def quantize_models(ens: EnsembleModel, kind: str) -> EnsembleModel:
    """The ensemble's models with ``kind`` (int8 or fp16) linear layers and output projection (CPU only, fp32
    models)."""
    engine = torch.backends.quantized.engine
    if kind == "fp16" and engine not in ("fbgemm", "x86"):
        raise ConfigError(f"--quantize fp16: needs fbgemm's kernels (x86 CPUs), and this torch uses '{engine}'; "
                          "use --quantize int8 or leave it out")
    for m in ens.models:
        if any(p.device.type != "cpu" for p in m.parameters()):
            raise ConfigError(f"--quantize {kind}: dynamic quantization runs on the CPU only; leave it out on a GPU")
        decoder = m.decoder
        weight = decoder.output_weight.detach()  # (V, C), the embedding matrix itself when tied
        projection = nn.Sequential(nn.Linear(weight.size(1), weight.size(0), bias=False))
        projection[0].weight = nn.Parameter(weight.clone(), requires_grad=False)  # a copy: the embeddings stay fp32
        quantize_linear_layers(m, kind)
        quantize_linear_layers(projection, kind)
        decoder.output_projection = projection[0]
    return ens
