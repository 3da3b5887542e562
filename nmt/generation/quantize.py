"""``--quantize int8|fp16``: dynamic quantization of the models' linear layers for CPU inference.

A decoding step of a few rows spends most of its time in the linear layers and the output projection,
and torch's fp32 product is slow for so few rows: against a vocabulary-sized output matrix that fits the
cache, a few rows take several times what reading the matrix takes, at a fraction of the arithmetic rate of
hundreds of rows (benchmarks/RESULTS.md, small_products). fbgemm's dynamic-quantized Linear keeps its weights
packed once, in fewer bytes:

- ``int8``: weights int8 per output channel, activations quantized per batch at run time. The fastest;
  hypotheses differ from fp32's for about one sentence in six (docs/generation.md).
- ``fp16``: weights in float16, activations and accumulation in fp32. Nearly fp32's hypotheses (998/1000
  on the peer model) at int8's speed for a few rows; no faster than fp32 for large batches.

Every ``nn.Linear`` becomes a :class:`PackedLinear`, and so does the output projection, tied to the
embeddings or not (``TransformerDecoder.output_projection``). Embeddings, LayerNorm, attention products and
the softmax stay fp32.

The weights are quantized and packed by ``torch.ao.quantization.quantize_dynamic`` (fbgemm/x86 kernels):
deprecated upstream in favour of the torchao package but present in the torch versions nmt supports."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from nmt.errors import ConfigError
from nmt.generation.ensemble import EnsembleModel

# the weight types --quantize offers: torch.ao's qconfig name and weight dtype for each
KINDS = {"int8": ("per_channel_dynamic_qconfig", torch.qint8), "fp16": ("float16_dynamic_qconfig", torch.float16)}

# fbgemm's kernels, called without torch.ops' per-call overload lookup
_FP16 = torch.ops.quantized.linear_dynamic_fp16.default
_INT8 = torch.ops.quantized.linear_dynamic.default


class PackedLinear(nn.Module):
    """A linear layer whose weights and bias fbgemm holds packed (int8 or fp16), for fp32 inputs (..., in)
    -> (..., out). It calls the kernel directly: torch.ao's dynamic-quantized Linear runs the same one but
    spends Python on every call getting there, a noticeable share of a lone sentence's beam search."""

    def __init__(self, quantized: Any):  # torch.ao's dynamic-quantized Linear (untyped)
        super().__init__()
        self.in_features, self.out_features = quantized.in_features, quantized.out_features
        self.dtype: torch.dtype = quantized._packed_params.dtype  # torch.qint8 or torch.float16
        self.packed = quantized._packed_params._packed_params  # fbgemm's packed weight and bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dtype == torch.float16:
            return _FP16(x, self.packed)
        return _INT8(x, self.packed, True)  # activations quantized to 7 bits, as torch.ao's module does

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, dtype={self.dtype}"


def quantize_linear_layers(module: nn.Module, kind: str) -> None:
    """In place: every nn.Linear below ``module`` becomes a :class:`PackedLinear` with ``kind`` weights. torch.ao
    quantizes nn.Linear itself, not its subclasses: ``module`` is a plain model (``nmt.cpu_speed`` not applied)."""
    from torch.ao import quantization
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    qconfig_name, dtype = KINDS[kind]
    with warnings.catch_warnings():  # torch.ao's deprecation notice: the kernels are what we measured
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        quantization.quantize_dynamic(module, {nn.Linear: getattr(quantization, qconfig_name)}, dtype=dtype,
                                      inplace=True)
    for parent in list(module.modules()):
        for name, child in parent.named_children():
            if isinstance(child, DynamicLinear):
                setattr(parent, name, PackedLinear(child))


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
