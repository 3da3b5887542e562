"""Distributed training gives the same model as one process accumulating the same batches:
2 ranks x --update-freq 1 == 1 rank x --update-freq 2 (the epoch iterator deals batch 2i to rank 0
and 2i+1 to rank 1, which are the two batches of update i in the single process). Dropout is 0."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from train_toy_data import make_toy_task

COMMON = ["--arch", "transformer_tiny", "--encoder-layers", "1", "--decoder-layers", "1", "--share-all-embeddings",
          "--dropout", "0", "--max-tokens", "256", "--max-update", "4", "--disable-validation", "--num-threads", "1",
          "--log-interval", "1", "--no-progress-bar", "--lr", "1e-3", "--warmup-updates", "2",
          "--no-epoch-checkpoints"]


def _train(cmd: list[str], cwd) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def _weights(save_dir) -> dict[str, torch.Tensor]:
    state = torch.load(save_dir / "checkpoint_last.pt", map_location="cpu", weights_only=True)
    assert state["training"]["num_updates"] == 4
    return state["model"]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """One process, --update-freq 2."""
    root = tmp_path_factory.mktemp("ddp")
    data = make_toy_task(root / "toy", n_train=300, n_valid=16)
    _train([sys.executable, "-m", "nmt.cli.train", str(data), *COMMON, "--update-freq", "2",
            "--save-dir", str(root / "single")], root)
    return data, _weights(root / "single")


@pytest.mark.slow
@pytest.mark.parametrize("launcher,ddp_backend", [("spawn", "pytorch_ddp"), ("torchrun", "legacy_ddp")])
def test_two_ranks_equal_one_rank_accumulating(single, tmp_path, launcher, ddp_backend):
    data, expected = single
    flags = [str(data), *COMMON, "--update-freq", "1", "--ddp-backend", ddp_backend, "--save-dir",
             str(tmp_path / "ddp")]
    if launcher == "spawn":  # nmt-train starts its own 2 workers
        cmd = [sys.executable, "-m", "nmt.cli.train", *flags, "--distributed-world-size", "2"]
    else:  # the standard launcher; the workers read RANK / WORLD_SIZE / MASTER_* from the environment
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "nmt.cli.train", *flags]
    _train(cmd, tmp_path)
    got = _weights(tmp_path / "ddp")
    assert got.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-5, rtol=0, msg=name)
    assert not (tmp_path / "ddp" / "checkpoint_last.pt.tmp").exists()
