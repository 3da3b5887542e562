"""What this machine computes with: the cores a process may use, and whether bf16 is worth choosing (only where
the hardware multiplies it natively: on a CPU without AVX512-BF16 or AMX, torch emulates bf16 products and they
run slower than fp32, 4-6x for decoding and over 10x for training on a 2-core EPYC, docs/mixed-precision.md)."""

from __future__ import annotations

import os

import torch


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one, else all of them)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cores_per_process(processes: int) -> int:
    """Each of ``processes`` processes running at once on this machine gets its share of the cores (at least one)."""
    return max(1, usable_cores() // max(1, processes))


def native_bf16(device: str = "cpu") -> bool:
    """True when bf16 matrix products run natively on ``device`` ("cpu" or "cuda[:N]")."""
    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    cpu = torch.cpu
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # private, so looked up with a fallback
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)
