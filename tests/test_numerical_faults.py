"""Numerical faults in a real `nmt-train`: a NaN/inf loss or gradient stops training in one line
naming the update and the last good checkpoint; under --fp16 an overflow skips the update, lowers
the loss scale and says so. The faults are planted by tests/fault_points.py."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.checkpoint.format import load_checkpoint
from train_toy_data import make_toy_task

pytestmark = pytest.mark.slow  # nmt-train subprocesses: a few seconds each

FAULT_POINTS = Path(__file__).with_name("fault_points.py")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_toy_task(tmp_path_factory.mktemp("numerical"), n_train=200, n_valid=8)


def train(data: Path, save_dir: Path, fault: str, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NMT_TEST_FAULT": fault}
    args = [str(data), "--arch", "transformer_tiny", "--encoder-layers", "1", "--decoder-layers", "1",
            "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
            "--decoder-ffn-embed-dim", "32", "--share-all-embeddings", "--max-tokens", "128", "--max-update", "6",
            "--save-interval-updates", "2", "--disable-validation", "--save-dir", str(save_dir), "--seed", "3",
            "--log-interval", "1", "--no-progress-bar", "--cpu", "--num-threads", "1", *extra]
    return subprocess.run([sys.executable, str(FAULT_POINTS), *args], capture_output=True, text=True, env=env,
                          timeout=240)


@pytest.mark.parametrize("fault,what", [("nan-loss:5", "the training loss is nan"),
                                        ("inf-grad:5", "the gradient norm is inf (fp32)")])
def test_non_finite_loss_or_gradient_stops_with_the_update_and_the_last_good_checkpoint(data, tmp_path, fault, what):
    save_dir = tmp_path / "ckpt"
    done = train(data, save_dir, fault)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith(f"nmt-train: error: update 5: {what}; training diverged"), error
    assert error.endswith(f"the last good checkpoint is {save_dir / 'checkpoint_1_4.pt'}"), error
    good = load_checkpoint(save_dir / "checkpoint_1_4.pt")
    assert good["training"]["num_updates"] == 4
    assert all(bool(t.isfinite().all()) for t in good["model"].values())  # the bad update was never applied
    assert load_checkpoint(save_dir / "checkpoint_last.pt")["training"]["num_updates"] == 4


def test_fp16_overflow_skips_the_update_lowers_the_scale_and_logs_it(data, tmp_path):
    save_dir = tmp_path / "ckpt"
    done = train(data, save_dir, "inf-grad:3", "--fp16", "--fp16-init-scale", "64",
                 "precision.fp16_scaler_on_cpu=true")
    assert done.returncode == 0, done.stderr[-3000:]
    logged = [line for line in done.stderr.splitlines() if "overflow" in line]
    assert len(logged) == 1 and logged[0].endswith("update 3: fp16 gradient overflow, update skipped; "
                                                   "loss scale now 32"), logged
    final = load_checkpoint(save_dir / "checkpoint_last.pt")["training"]
    assert final["num_updates"] == 6  # the skipped update did not count: 7 tries, 6 updates
    assert math.isclose(final["scaler"]["scaler"]["loss_scale"], 32.0)
    assert all(bool(t.isfinite().all()) for t in load_checkpoint(save_dir / "checkpoint_last.pt")["model"].values())
