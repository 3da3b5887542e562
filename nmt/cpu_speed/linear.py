"""Linear products on the CPU: bf16/fp16 products on a few row counts, and weights packed in oneDNN's layout.

On the CPU, torch runs bf16 (and fp16) matrix products through oneDNN, which builds a kernel for each
shape: milliseconds per product on first sight and a megabyte or two kept per shape in its primitive
cache, plus memory that the cache's capacity does not bound. Token-based batching gives nearly every
update new row counts (batch x length), so a bf16 run built kernels all the time and its memory kept
growing with every update, where fp32's stays flat (docs/training.md).

Here the rows of a bf16/fp16 product on the CPU (under autocast, as in training and nmt-validate, or
with bf16 weights, as in nmt-generate --bf16) are padded with zeros up to the next of 16 sizes per
octave (at most 1/16 more rows, a few percent on average), so a few shapes serve every batch: a run's
memory then stops growing at the same speed, and greedy search, whose row count changes at almost every
step as sentences finish, runs faster with the same hypotheses. Padded rows are
zero, so they change no real row's output and add nothing to the weight's gradient. fp32 (MKL builds
nothing per shape) and CUDA (nor does cuBLAS) go through ``F.linear`` unchanged.

For inference the weights can also be held in oneDNN's own layout (:func:`pack_weight`, which nmt-generate
does once at load): a product of a few rows then reads them as a stream instead of reordering the plain
matrix on every call: for weights that are not in the cache, about half the time or less. In bf16 the results
are the same bit for bit (docs/generation.md). fp32 packs too: oneDNN's fp32 kernels on its own layout beat
MKL's on the plain matrix for every shape a decoding step has (benchmarks/RESULTS.md, decoding_levers); their
results differ from MKL's in the last bits (about 3e-6), and fp32 packed products also take the bucketed row
counts, since oneDNN builds a kernel per shape in fp32 as in bf16.

:class:`BucketedLinear` is ``nn.Linear`` with these products, :class:`BucketedProjection` and
:class:`PackedProjection` the decoder's output product with them; ``nmt.cpu_speed.swap_layers`` puts them in
a plain model, on the same parameters.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

BUCKETS_PER_OCTAVE_LOG2 = 4  # 16 row counts between n and 2n


def bucket_rows(rows: int) -> int:
    """The smallest of the bucket sizes that holds ``rows``: a multiple of 2^(bits(rows) - 5), so at
    most 1/16 above ``rows`` (32 rows and fewer are their own bucket)."""
    step = 1 << max(rows.bit_length() - BUCKETS_PER_OCTAVE_LOG2 - 1, 0)
    return -(-rows // step) * step


def padded_rows(t: Tensor, rows: int, dtype: torch.dtype) -> Tensor:
    """``t`` (M, N) cast to ``dtype`` with zero rows below it, (rows, N)."""
    out = t.new_empty(rows, t.size(1), dtype=dtype)
    out[: t.size(0)].copy_(t)
    out[t.size(0):].zero_()
    return out


def _padded_product(x: Tensor, weight: Tensor, bias: Optional[Tensor], rows: int,
                    dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    """(x W^T + b for x's M rows, the padded x (rows, K), W) in ``dtype``, computed on ``rows`` rows."""
    xp = padded_rows(x, rows, dtype)  # (rows, K)
    w = weight.to(dtype)  # (N, K)
    y = torch.mm(xp, w.t()) if bias is None else torch.addmm(bias.to(dtype), xp, w.t())  # (rows, N)
    return y[: x.size(0)], xp, w


class _RowBucketedLinear(torch.autograd.Function):
    """x W^T + b in ``dtype`` on ``rows`` rows (x's own rows, then zeros); forward and backward keep that
    row count, so the weight gradient's product has a bucketed shape too. It does the casts autocast would
    have done (inputs to ``dtype``, gradients back to each input's dtype)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Optional[Tensor], rows: int,
                dtype: torch.dtype) -> Tensor:
        y, xp, w = _padded_product(x, weight, bias, rows, dtype)
        ctx.save_for_backward(xp, w)
        ctx.meta = (x.size(0), x.dtype, weight.dtype, None if bias is None else bias.dtype)
        return y

    @staticmethod
    def backward(ctx: Any, grad_y: Tensor) -> tuple[Optional[Tensor], ...]:
        xp, w = ctx.saved_tensors
        m, x_dtype, w_dtype, b_dtype = ctx.meta
        gp = padded_rows(grad_y, xp.size(0), xp.dtype)  # (rows, N), zero below the real rows
        grad_x = torch.mm(gp, w)[:m].to(x_dtype) if ctx.needs_input_grad[0] else None
        grad_w = torch.mm(gp.t(), xp).to(w_dtype) if ctx.needs_input_grad[1] else None
        grad_b = grad_y.sum(0).to(b_dtype) if b_dtype is not None and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b, None, None


def bucketed_dtype(x: Tensor, weight: Tensor) -> Optional[torch.dtype]:
    """The dtype a product of ``x`` and ``weight`` runs in when it runs on bucketed rows: bf16 or fp16 on the CPU
    (autocast's dtype, else the weight's); None for a plain ``F.linear`` (fp32, CUDA, compiled code)."""
    if x.device.type != "cpu" or x.dim() < 2:
        return None
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else weight.dtype
    if (dtype is not torch.bfloat16 and dtype is not torch.float16) or torch.compiler.is_compiling():
        return None  # (compiled code, --compile: inductor's own products)
    return dtype


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """``F.linear(x, weight, bias)``; a CPU product in bf16/fp16 (under autocast, or with such weights) runs on
    bucketed rows. Called for every linear layer at every decoding step, so it keeps its own cost low."""
    dtype = bucketed_dtype(x, weight)
    if dtype is None:
        return F.linear(x, weight, bias)
    m = x.numel() // x.size(-1)
    rows = bucket_rows(m)
    if rows == m:
        return F.linear(x, weight, bias)
    flat = x.reshape(m, x.size(-1))  # (M, K)
    # Every input of a product below is already in autocast's dtype, so autocast (when on) leaves them alone.
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                    or (bias is not None and bias.requires_grad)):
        y = _RowBucketedLinear.apply(flat, weight, bias, rows, dtype)  # (M, N)
    else:  # inference: the same product without autograd's bookkeeping (about 30 us a call)
        y = _padded_product(flat, weight, bias, rows, dtype)[0]
    return y.view(*x.shape[:-1], y.size(-1))


def pack_weight(weight: Tensor) -> Optional[Tensor]:
    """A bf16 or fp32 CPU weight (N, K) in oneDNN's layout for :func:`packed_linear` (None: another dtype or device,
    or this torch has no oneDNN). For inference only: the packed copy does not follow later changes to ``weight``."""
    if (weight.dtype not in (torch.bfloat16, torch.float32) or weight.device.type != "cpu"
            or not torch.backends.mkldnn.is_available()):
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
    except (AttributeError, RuntimeError):  # a torch built without these oneDNN ops
        return None


def packed_linear(x: Tensor, packed: Tensor, bias: Optional[Tensor], out_features: int) -> Tensor:
    """``F.linear`` of ``x`` (..., K) with a weight of its dtype from :func:`pack_weight`, on bucketed rows (no
    autograd)."""
    m = x.numel() // x.size(-1)
    rows = bucket_rows(m)
    if rows == m:  # (oneDNN's op takes any leading shape: one operator instead of four, at every decoding step)
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")  # (..., N)
    flat = padded_rows(x.reshape(m, x.size(-1)), rows, x.dtype)  # (rows, K)
    y = torch.ops.mkldnn._linear_pointwise(flat, packed, bias, "none", [], "")  # (rows, N)
    return y[:m].view(*x.shape[:-1], out_features)


class BucketedLinear(nn.Linear):
    """``nn.Linear`` (same parameters and state dict) whose forward is :func:`linear`; after :meth:`pack`,
    inference in the weight's dtype runs :func:`packed_linear` instead."""

    packed: Optional[Tensor] = None  # the weight in oneDNN's layout (inference), not part of the state dict

    @classmethod
    def sharing(cls, layer: nn.Linear) -> BucketedLinear:
        """A BucketedLinear holding ``layer``'s own weight and bias Parameters (an optimizer built on either sees
        the same tensors), in ``layer``'s train/eval mode."""
        out = cls(layer.in_features, layer.out_features, bias=layer.bias is not None, device="meta")
        out.weight = layer.weight
        out.bias = layer.bias
        return out.train(layer.training)

    def forward(self, x: Tensor) -> Tensor:
        if self.packed is not None and x.dtype is self.weight.dtype and not torch.is_grad_enabled():
            return packed_linear(x, self.packed, self.bias, self.out_features)
        return linear(x, self.weight, self.bias)

    def pack(self) -> bool:
        """Keep a copy of the (bf16 or fp32, CPU) weight in oneDNN's layout for inference; False if it cannot be had."""
        self.packed = pack_weight(self.weight)
        return self.packed is not None


class BucketedProjection(nn.Module):
    """The decoder's output product ``F.linear(x, weight)`` through :func:`linear` (bucketed rows in CPU bf16/fp16),
    as ``TransformerDecoder.output_projection``. ``weight`` is the decoder's own ``output_weight`` Parameter
    (the embeddings' when tied), held here as a plain attribute, not registered: the state dict and the
    parameters are unchanged, and the model's ``output_matrix()`` still offers that matrix to the loss."""

    weight: Tensor

    def __init__(self, weight: Tensor):
        super().__init__()
        self.__dict__["weight"] = weight  # (V, C); nn.Module's __setattr__ would register a Parameter

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight)  # (..., V)

    def extra_repr(self) -> str:
        return f"in_features={self.weight.size(1)}, out_features={self.weight.size(0)}, shares output_weight"


class PackedProjection(nn.Module):
    """A bias-free product with a weight packed by :func:`pack_weight`, for inference: the output projection
    (``TransformerDecoder.output_projection``), whose matrix is the embeddings' own when tied. It holds no
    parameters, so the state dict is unchanged."""

    def __init__(self, packed: Tensor, out_features: int):
        super().__init__()
        self.packed = packed
        self.out_features = out_features

    def forward(self, x: Tensor) -> Tensor:
        return packed_linear(x, self.packed, None, self.out_features)
