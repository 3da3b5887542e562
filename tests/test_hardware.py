"""nmt.hardware: bf16 is chosen only where the CPU has bf16 instructions (AVX512-BF16 / AMX) and its bf16 products
are measured faster than fp32's, or on a GPU that supports bf16."""

from __future__ import annotations

import pytest
import torch

from nmt import hardware
from nmt.hardware import bf16_instructions, bf16_is_faster


@pytest.fixture(autouse=True)
def measured_afresh():
    bf16_is_faster.cache_clear()
    yield
    bf16_is_faster.cache_clear()


def test_cpu_instructions_follow_torchs_feature_checks(monkeypatch):
    for avx, amx, expected in ((False, False, False), (True, False, True), (False, True, True)):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda v=avx: v, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda v=amx: v, raising=False)
        assert bf16_instructions("cpu") is expected


def test_a_torch_without_the_checks_means_no(monkeypatch):
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    assert bf16_instructions() is False and bf16_is_faster() is False


@pytest.mark.parametrize("bf16_seconds, expected", [(0.5, True), (0.8, True), (0.9, False), (2.0, False)])
def test_a_cpu_with_the_instructions_chooses_by_the_measured_product(monkeypatch, bf16_seconds, expected):
    """AMX or an EPYC's AVX512-BF16 multiply bf16 2-4x faster than fp32; a Xeon with AVX512-BF16 but no AMX was
    measured at half fp32's speed, so the flags alone would choose the slower precision there."""
    monkeypatch.setattr(hardware, "bf16_instructions", lambda device="cpu": True)
    timed = []

    def product_seconds(dtype):
        timed.append(dtype)
        return bf16_seconds if dtype == torch.bfloat16 else 1.0

    monkeypatch.setattr(hardware, "product_seconds", product_seconds)
    assert bf16_is_faster("cpu") is expected
    assert bf16_is_faster("cpu") is expected and len(timed) == 2  # measured once per process


def test_no_instructions_no_measurement(monkeypatch):
    monkeypatch.setattr(hardware, "bf16_instructions", lambda device="cpu": False)
    monkeypatch.setattr(hardware, "product_seconds", lambda dtype: pytest.fail("measured without bf16 instructions"))
    assert bf16_is_faster("cpu") is False


def test_product_seconds_times_a_real_product():
    assert hardware.product_seconds(torch.float32, rows=8, inner=8, cols=8, repeats=2) > 0


def test_cuda_needs_a_gpu_with_bf16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bf16_is_faster("cuda") is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert bf16_is_faster("cuda:0") is True
