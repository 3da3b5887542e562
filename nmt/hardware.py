"""What this machine computes with: the cores a process may use, and whether bf16 is worth choosing over fp32.

bf16 pays only where its matrix products are faster than fp32's, and CPU flags do not say so: without
AVX512-BF16 or AMX torch emulates them (several times slower to decode, over 10x slower to train), and even
with AVX512-BF16 but no AMX a CPU may multiply bf16 at half fp32's speed (docs/mixed-precision.md). So on a
CPU the choice is measured."""

from __future__ import annotations

import functools
import os
import time

import torch


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one, else all of them)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cores_per_process(processes: int) -> int:
    """Each of ``processes`` processes running at once on this machine gets its share of the cores (at least one)."""
    return max(1, usable_cores() // max(1, processes))


def bf16_instructions(device: str = "cpu") -> bool:
    """True when ``device`` ("cpu" or "cuda[:N]") has bf16 matrix instructions (AVX512-BF16 or AMX on a CPU)."""
    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    cpu = torch.cpu
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # private, so looked up with a fallback
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


# bf16 is chosen on a CPU when its product takes at most this fraction of fp32's (1.25x faster): a training or
# decoding step also spends time outside the products, on casts and on element-wise work
BF16_TIME_RATIO = 0.8


def product_seconds(dtype: torch.dtype, rows: int = 512, inner: int = 256, cols: int = 1024, repeats: int = 5) -> float:
    """The best of ``repeats`` timings of one (rows x inner) @ (inner x cols) product on the CPU, in ``dtype``, with
    this process's threads (the shape of a small Transformer's feed-forward layer on a batch)."""
    a, b = torch.randn(rows, inner, dtype=dtype), torch.randn(inner, cols, dtype=dtype)
    a @ b  # the first call picks and builds the kernel
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - started)
    return best


@functools.cache
def bf16_is_faster(device: str = "cpu") -> bool:
    """Whether bf16 is worth choosing on ``device``: a GPU that supports it, or a CPU with bf16 instructions whose
    bf16 product is measured faster than its fp32 one (a few milliseconds, once per process)."""
    if not bf16_instructions(device):
        return False
    if device.startswith("cuda"):
        return True
    return product_seconds(torch.bfloat16) <= BF16_TIME_RATIO * product_seconds(torch.float32)
