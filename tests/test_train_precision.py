"""Mixed precision: fp16's dynamic loss scaling (skipped overflow steps, scale changes, divergence),
the NaN/inf stop in fp32, and --bf16 training on the CPU staying close to fp32."""

from __future__ import annotations

import math

import pytest
import torch

from nmt.config.train import PrecisionConfig
from nmt.errors import ConfigError
from nmt.training.precision import DynamicLossScaler, Precision, TrainingDiverged
from train_toy_data import build_run, make_toy_task


@pytest.fixture(scope="module")
def toy_bin(tmp_path_factory):
    return make_toy_task(tmp_path_factory.mktemp("toy"), n_train=400, n_valid=32)


# ---------------------------------------------------------------- the scaler on its own


def test_overflow_halves_the_scale_and_skips_the_update():
    scaler = DynamicLossScaler(init_scale=128.0, scale_window=1000)
    assert scaler.update(False, num_updates=0) is False
    assert scaler.loss_scale == 64.0
    assert scaler.update(True, num_updates=0) is True
    assert scaler.loss_scale == 64.0


def test_scale_doubles_after_a_window_without_overflow():
    scaler = DynamicLossScaler(init_scale=8.0, scale_window=3)
    scaler.update(False, 0)  # 4.0, then 3 clean updates
    scales = []
    for _ in range(6):
        scaler.update(True, 0)
        scales.append(scaler.loss_scale)
    assert scales == [4.0, 4.0, 8.0, 8.0, 8.0, 16.0]


def test_floor_and_divergence_below_min_loss_scale():
    floored = DynamicLossScaler(init_scale=4.0, floor=2.0)
    for _ in range(3):
        floored.update(False, 0)
    assert floored.loss_scale == 2.0
    scaler = DynamicLossScaler(init_scale=1.0, min_loss_scale=0.25)
    scaler.update(False, 5)  # 0.5
    with pytest.raises(TrainingDiverged, match=r"update 7: .*--min-loss-scale"):
        scaler.update(False, 6)  # 0.25 <= min: diverged
    assert scaler.loss_scale == 0.5  # the last usable scale is kept


def test_scaler_state_round_trips():
    a = DynamicLossScaler(init_scale=32.0, scale_window=4)
    for finite in (True, False, True, True):
        a.update(finite, 0)
    b = DynamicLossScaler(scale_window=4)  # the window comes from the config, not the state
    b.load_state_dict(a.state_dict())
    for finite in (True, True, False, True):
        assert a.update(finite, 0) == b.update(finite, 0)
        assert a.loss_scale == b.loss_scale


def test_fp16_without_cuda_is_a_clear_error():
    with pytest.raises(ConfigError, match="--fp16 needs a CUDA GPU.*--bf16"):
        Precision(PrecisionConfig(fp16=True), torch.device("cpu"))
    with pytest.raises(ConfigError, match="choose one"):
        Precision(PrecisionConfig(fp16=True, bf16=True), torch.device("cpu"))


# ---------------------------------------------------------------- inside the trainer


def _params(trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.params]


def _inject(trainer, value: float):
    """Make the next backward give one parameter a ``value`` (inf/nan) gradient."""
    return trainer.params[0].register_hook(lambda g: torch.full_like(g, value))


@pytest.fixture
def fp16_on_cpu(monkeypatch):
    """Run --fp16's loss scaler on the CPU (the model stays fp32: float16 autocast is CUDA-only)."""
    from nmt.training import precision

    monkeypatch.setattr(precision, "fp16_available", lambda device: True)


def test_fp16_overflow_step_is_skipped_and_scale_lowered(toy_bin, tmp_path, fp16_on_cpu):
    run = build_run(toy_bin, tmp_path, "precision.fp16=true",
                    "precision.fp16_scale_window=2", "precision.fp16_init_scale=64")
    t = run.trainer
    batches = list(run.train_itr.next_epoch_itr())
    before = _params(t)
    hook = _inject(t, math.inf)
    stats = t.train_step([batches[0]])
    hook.remove()
    assert stats["applied"] is False and t.num_updates == 0
    assert t.precision.loss_scale == 32.0
    assert all(torch.equal(a, b) for a, b in zip(before, _params(t)))  # nothing moved
    assert all(p.grad is None for p in t.params)  # the bad gradients were dropped
    for i in (1, 2):
        stats = t.train_step([batches[i]])
        assert stats["applied"] is True
    assert t.num_updates == 2
    assert t.precision.loss_scale == 64.0  # doubled after a window of 2 clean updates
    assert not all(torch.equal(a, b) for a, b in zip(before, _params(t)))


def test_fp16_loss_scaling_gives_the_fp32_update(toy_bin, tmp_path, fp16_on_cpu):
    """Scaling the loss by S and the gradients by 1/S must not change the update."""
    runs = [build_run(toy_bin, tmp_path / "a"),
            build_run(toy_bin, tmp_path / "b", "precision.fp16=true",
                      "precision.fp16_init_scale=1024")]
    for run in runs:
        batch = next(run.train_itr.next_epoch_itr())
        run.trainer.train_step([batch])
    for a, b in zip(*(_params(r.trainer) for r in runs)):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_fp32_nan_gradient_stops_training_naming_the_update(toy_bin, tmp_path):
    run = build_run(toy_bin, tmp_path)
    batches = iter(run.train_itr.next_epoch_itr())
    run.trainer.train_step([next(batches)])
    _inject(run.trainer, math.nan)
    with pytest.raises(TrainingDiverged, match=r"update 2: the gradient norm is nan"):
        run.trainer.train_step([next(batches)])


def test_bf16_loss_after_30_updates_is_within_5_percent_of_fp32(toy_bin, tmp_path):
    losses = {}
    for name, extra in (("fp32", []), ("bf16", ["precision.bf16=true"])):
        run = build_run(toy_bin, tmp_path / name, "optimization.lr=0.003", "lr_scheduler.warmup_updates=10",
                        "optimizer.adam_betas=(0.9,0.98)", *extra)
        assert run.trainer.precision.name == name
        seen = []
        while run.trainer.num_updates < 30:
            for batch in run.train_itr.next_epoch_itr():
                stats = run.trainer.train_step([batch])
                seen.append(stats["loss"] / stats["sample_size"])
                if run.trainer.num_updates == 30:
                    break
        losses[name] = sum(seen[-5:]) / 5  # mean per-token loss of updates 26-30
        assert losses[name] < 0.9 * seen[0]  # it learned something
        assert all(p.dtype == torch.float32 for p in run.trainer.params)  # master weights stay fp32
        state = run.trainer.optimizer.state[run.trainer.params[0]]
        assert state["exp_avg"].dtype == torch.float32  # and so does the optimizer state
    assert abs(losses["bf16"] - losses["fp32"]) <= 0.05 * losses["fp32"], losses
