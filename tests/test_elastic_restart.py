"""An elastic restart under torchrun ends where an uninterrupted run ends.

torchrun --max-restarts 1 runs 2 workers; once checkpoint_last.pt exists, rank 1 (planted with a
``stall`` fault through tests/fault_points.py, so the kill lands at a known update) is SIGKILLed.
torchrun stops rank 0, starts both again, and they resume from checkpoint_last.pt (the save-dir
lock died with the old rank 0) with each rank's own random generators: with dropout on, the final
parameters equal those of a run that was never killed."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch

from torchrun_launch import TORCHRUN, agents, clean_env, finish
from train_toy_data import make_toy_task

pytestmark = pytest.mark.slow

FAULT_POINTS = Path(__file__).with_name("fault_points.py")
MAX_UPDATE = 8  # 4 batches per rank per epoch: the run crosses an epoch boundary after the restart
KILL_AT = 4  # rank 1 stalls at the start of update 4; checkpoint_last.pt holds update 2


def torchrun(data: Path, save_dir: Path, *launch: str) -> list[str]:
    return [*TORCHRUN, "--standalone", "--nproc-per-node", "2", "--monitor-interval", "0.2", *launch,
            str(FAULT_POINTS), str(data), "--arch", "transformer_tiny", "--encoder-layers", "1", "--decoder-layers",
            "1", "--share-all-embeddings", "--dropout", "0.1", "--max-tokens", "256", "--max-update", str(MAX_UPDATE),
            "--save-interval-updates", "2", "--batch-size-valid", "4", "--seed", "5", "--lr", "1e-3",
            "--warmup-updates", "2", "--no-epoch-checkpoints", "--num-threads", "1", "--no-progress-bar",
            "--cpu", "--save-dir", str(save_dir)]


def weights(save_dir: Path) -> dict[str, torch.Tensor]:
    state = torch.load(save_dir / "checkpoint_last.pt", map_location="cpu", weights_only=True)
    assert state["training"]["num_updates"] == MAX_UPDATE
    return state["model"]


def wait_for(path: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} did not appear within {timeout} s"
        time.sleep(0.1)


def test_a_killed_worker_restarts_the_group_which_resumes_and_ends_as_if_never_killed(tmp_path):
    data = make_toy_task(tmp_path / "toy", n_train=300, n_valid=15)
    with agents([torchrun(data, tmp_path / "reference")], tmp_path, clean_env()) as procs:
        finish(procs)

    save_dir, marker = tmp_path / "killed", tmp_path / "stalled.pid"
    env = clean_env(NMT_TEST_FAULT=f"stall:{KILL_AT}:1", NMT_TEST_FAULT_MARKER=str(marker))
    with agents([torchrun(data, save_dir, "--max-restarts", "1")], tmp_path, env) as procs:
        wait_for(marker)
        assert (save_dir / "checkpoint_last.pt").exists()
        os.kill(int(marker.read_text()), signal.SIGKILL)  # the worker, not torchrun
        log = finish(procs)[0]
    assert "local_rank: 1" in log and "exitcode: -9" in log  # torchrun saw the kill and restarted the group
    resumed = [line for line in log.splitlines() if "resumed from" in line]
    assert len(resumed) == 1 and f"{save_dir / 'checkpoint_last.pt'} at epoch 1, update {KILL_AT - 2}" in resumed[0]
    expected, got = weights(tmp_path / "reference"), weights(save_dir)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=0, rtol=0, msg=name)
