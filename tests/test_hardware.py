"""nmt.hardware.native_bf16: bf16 is chosen only where the CPU (AVX512-BF16 / AMX) or GPU multiplies it natively."""

from __future__ import annotations

import torch

from nmt.hardware import native_bf16


def test_cpu_follows_torchs_feature_checks(monkeypatch):
    for avx, amx, expected in ((False, False, False), (True, False, True), (False, True, True)):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda v=avx: v, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda v=amx: v, raising=False)
        assert native_bf16("cpu") is expected


def test_a_torch_without_the_checks_means_no(monkeypatch):
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    assert native_bf16() is False


def test_cuda_needs_a_gpu_with_bf16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert native_bf16("cuda") is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert native_bf16("cuda:0") is True
