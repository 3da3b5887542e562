"""Why a decoding step of a few rows is slow: the linear layers' products at the rows a step has.

For each weight shape of a Transformer decoder step (the output projection to the vocabulary and the
layers' 256->256, 256->1024 and 1024->256 products of the fairseq reference shape, by default) and each row
count, it times, in one process and taking turns:

- ``F.linear`` in fp32 (what nmt-generate runs),
- reading the weight matrix once (``W.sum()``; from the cache when it fits, as the peer model's 10 MB output
  matrix fits this CPU's 32 MB L3): the least a product that streamed its weights would cost,
- fbgemm's packed products with int8 and with fp16 weights (``--quantize int8`` / ``fp16``, ``PackedLinear``),
- MKL's packed fp32 product (``torch.ops.mkl._mkl_linear`` on a weight packed once, as inductor's freezing runs
  fp32 linear layers; not used by nmt-generate), when torch was built with MKL,

each the median of ``--repeats`` blocks of calls. On 2026-11-24's 2-core EPYC (AVX2, torch 2.13.0, MKL)
fp32 ``F.linear`` of the output projection took 9x the weight read for 5 rows and ran at 36 GFLOP/s, against
146 for 640 rows: for a few rows the product is bound by its own overhead, not by reading the weights.

    python benchmarks/small_products.py [--rows 1,5,20,50,160,640] [--threads 2] [--vocab 9808 --dim 256 --ffn 1024]
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import statistics
import time
from typing import Callable

import torch
from torch import nn

from nmt.generation.quantize import quantize_linear_layers


def median_ms(fn: Callable[[torch.Tensor], object], arg: torch.Tensor, calls: int, repeats: int) -> float:
    """Milliseconds per ``fn(arg)``: the median of ``repeats`` blocks of ``calls`` calls."""
    for _ in range(3):
        fn(arg)
    blocks = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(arg)
        blocks.append((time.perf_counter() - start) / calls * 1e3)
    return statistics.median(blocks)


def quantized(linear: nn.Linear, kind: str) -> nn.Module:
    """``linear`` as the ``PackedLinear`` that ``--quantize`` makes it (``linear`` stays fp32)."""
    wrapper = nn.Sequential(linear)
    quantize_linear_layers(wrapper, kind)  # replaces the wrapper's child, not ``linear`` itself
    return wrapper


def mkl_packed(linear: nn.Linear, rows: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """``linear`` as MKL's packed fp32 product (packed for ``rows``), or None without MKL."""
    if not torch.backends.mkl.is_available():
        return None
    weight, bias = linear.weight.detach(), linear.bias.detach()
    packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)
    return lambda x: torch.ops.mkl._mkl_linear(x, packed, weight, bias, rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,5,20,50,160,640", help="Row counts (beam x sentences of a step).")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=9808)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shapes = {"output projection": (args.dim, args.vocab), "attention in/out": (args.dim, args.dim),
              "FFN up": (args.dim, args.ffn), "FFN down": (args.ffn, args.dim)}
    print(f"{args.threads} threads, torch {torch.__version__}; milliseconds per call, median of {args.repeats} blocks")
    print("| product | weights | rows | fp32 F.linear | read the weights | int8 | fp16 weights | fp32 MKL packed "
          "| fp32 GFLOP/s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, (fan_in, fan_out) in shapes.items():
        linear = nn.Linear(fan_in, fan_out)
        int8, fp16 = quantized(nn.Linear(fan_in, fan_out), "int8"), quantized(linear, "fp16")
        weight = linear.weight.detach()
        calls = max(20, int(2e8 / weight.numel() / 10))
        with torch.inference_mode():
            for rows in [int(r) for r in args.rows.split(",")]:
                x = torch.randn(rows, fan_in)
                ms = {"fp32": median_ms(linear, x, calls, args.repeats),
                      "read": median_ms(torch.sum, weight, calls, args.repeats),
                      "int8": median_ms(int8, x, calls, args.repeats),
                      "fp16": median_ms(fp16, x, calls, args.repeats)}
                packed = mkl_packed(linear, rows)
                mkl = f"{median_ms(packed, x, calls, args.repeats):.3f}" if packed is not None else "-"
                gflops = 2 * rows * weight.numel() / ms["fp32"] / 1e6
                print(f"| {name} | {fan_out} x {fan_in} | {rows} | {ms['fp32']:.3f} | {ms['read']:.3f} | "
                      f"{ms['int8']:.3f} | {ms['fp16']:.3f} | {mkl} | {gflops:.0f} |")


if __name__ == "__main__":
    main()
