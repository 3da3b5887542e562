"""What this machine computes fast: bf16 is only worth choosing where the hardware multiplies it natively.
On a CPU without AVX512-BF16 or AMX, torch emulates bf16 products and they run slower than fp32 (4-6x for
decoding, over 10x for training on a 2-core EPYC without them, docs/mixed-precision.md)."""

from __future__ import annotations

import torch


def native_bf16(device: str = "cpu") -> bool:
    """True when bf16 matrix products run natively on ``device`` ("cpu" or "cuda[:N]")."""
    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    cpu = torch.cpu
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # private, so looked up with a fallback
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)
