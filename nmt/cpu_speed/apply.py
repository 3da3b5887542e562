"""The calls that put nmt's CPU speed tricks into a plain model and into the process (``nmt.cpu_speed`` lists
them and says why each pays)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from nmt.cpu_speed.dropout import LaneDropout
from nmt.cpu_speed.linear import BucketedLinear, BucketedProjection, PackedProjection, pack_weight
from nmt.cpu_speed.memory import keep_built_kernels, keep_freed_memory
from nmt.models.attention import AttentionBase

RECOMPILE_LIMIT = 64  # --compile: compiled variants of the decoder step kept at most (dynamo's default is 8)


def _cpu_form(module: nn.Module) -> Optional[nn.Module]:
    """The CPU form of a plain layer, on its own parameters; None for anything else. Only the plain classes
    themselves: a subclass computes its own way (a plugin's own layer, torch.ao's quantized ones)."""
    if type(module) is nn.Linear:
        return BucketedLinear.sharing(module)
    if type(module) is nn.Dropout and not module.inplace:
        return LaneDropout.replacing(module)
    return None


def swap_layers(model: nn.Module) -> nn.Module:
    """``model``, in place, with the CPU forms of its plain layers: every ``nn.Linear`` a :class:`BucketedLinear`
    holding the same weight and bias Parameters, every ``nn.Dropout`` a :class:`LaneDropout` of the same rate, and
    a decoder with an ``output_weight`` (and no output projection yet) a :class:`BucketedProjection` of that matrix.

    The parameters (the same tensor objects, so an optimizer built before or after sees them), the state dict
    (keys and values) and the train/eval mode are unchanged, and no random number is drawn. In fp32, and off the
    CPU, the outputs are those of the plain model bit for bit; in bf16/fp16 on the CPU the products run on
    bucketed rows, and in training the dropout masks come from :func:`nmt.cpu_speed.dropout.dropout`. A second
    call changes nothing."""
    swapped: dict[int, tuple[nn.Module, nn.Module]] = {}  # id(plain layer) -> (it, its CPU form): shared layers
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if id(child) not in swapped:
                new = _cpu_form(child)
                if new is None:
                    continue
                swapped[id(child)] = (child, new)  # the plain layer kept alive: its id stays its own
            setattr(parent, name, swapped[id(child)][1])
    decoder = getattr(model, "decoder", None)
    weight = getattr(decoder, "output_weight", None)
    projection = getattr(decoder, "output_projection", False)  # None: the plain product with output_weight
    if isinstance(decoder, nn.Module) and isinstance(weight, Tensor) and projection is None:
        decoder.output_projection = BucketedProjection(weight).train(decoder.training)
    return model


def fp32_attention_caches(model: nn.Module) -> None:
    """In place: the attention modules of a bf16 ``model`` that allow it keep their decoding cache in fp32 and
    attend in fp32 (``AttentionBase.cache_dtype``). oneDNN builds a kernel for each shape of a bf16 batched
    product, and a step's attention products take a new shape at nearly every step (the keys grow by one, rows
    leave and join), so a search keeps building kernels. fp32 products run on MKL, which builds nothing per shape
    (benchmarks/RESULTS.md has the figures)."""
    for module in model.modules():
        if isinstance(module, AttentionBase) and module.supports_fp32_cache:
            module.cache_dtype = torch.float32


def pack_layers(model: nn.Module) -> None:
    """In place: every BucketedLinear of a bf16 or fp32 CPU ``model`` keeps a packed copy of its weight, and a decoder
    whose output product is its ``output_weight`` (plain or bucketed) gets a packed one (nothing where packing is not
    available). For inference only: the packed copies do not follow later changes to the weights."""
    for module in model.modules():
        if isinstance(module, BucketedLinear):
            module.pack()
    decoder = getattr(model, "decoder", None)
    weight = getattr(decoder, "output_weight", None)
    if isinstance(decoder, nn.Module) and isinstance(weight, Tensor) \
            and isinstance(getattr(decoder, "output_projection", None), (type(None), BucketedProjection)):
        packed = pack_weight(weight)
        if packed is not None:
            decoder.output_projection = PackedProjection(packed, weight.size(0)).train(decoder.training)


def for_inference(model: nn.Module, bf16: bool, pack: bool = True) -> nn.Module:
    """``model``, in place, as eager generation runs it: :func:`swap_layers`, then

    ``bf16`` (--bf16): the weights, and so every activation, in bfloat16 (a search still turns logits into fp32
    log-probabilities). Casting the weights once beats autocast, which re-casts every weight at every decoding step
    (docs/generation.md).

    ``pack``: the linear layers and the output product also keep their weights in oneDNN's layout
    (:func:`pack_layers`), in bf16 and in fp32: steps of a few rows about twice as fast in their products (bf16: the
    same results bit for bit; fp32: to the last bits). Not for --compile, whose inductor packs the weights it freezes
    itself. With ``pack`` a bf16 decoding step also attends in fp32 (:func:`fp32_attention_caches`)."""
    swap_layers(model)
    if bf16:
        model.to(torch.bfloat16)
    if pack:
        pack_layers(model)
        if bf16:
            fp32_attention_caches(model)
    return model


def allow_recompiles() -> None:
    """Let dynamo keep up to RECOMPILE_LIMIT compiled variants of a function (process-wide). Each kind of decoding
    step is a compiled variant of the one decoder step; past dynamo's default of 8 a new kind would run eagerly
    (slowly) for the rest of the process, and a server meets more (beams, padding, attention weights)."""
    import torch._dynamo.config

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)


def process_settings(compiled: bool = False) -> None:
    """The process-wide settings, once per process before its first model runs: freed memory kept
    (:func:`nmt.cpu_speed.memory.keep_freed_memory`), oneDNN's larger kernel cache (``keep_built_kernels``, which must
    come before the first bf16 product) and, with ``compiled`` (--compile), more compiled variants kept
    (:func:`allow_recompiles`)."""
    keep_freed_memory()
    keep_built_kernels()
    if compiled:
        allow_recompiles()
