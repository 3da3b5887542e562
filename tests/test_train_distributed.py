"""Distributed training gives the same model as one process accumulating the same batches:
2 ranks x --update-freq 1 == 1 rank x --update-freq 2 (the epoch iterator deals batch 2i to rank 0
and 2i+1 to rank 1, which are the two batches of update i in the single process). Dropout is 0.
The ranks are local workers nmt-train spawns, torchrun's on one machine, or two torchrun agents
meeting on a c10d rendezvous as two machines would.

Validation is exact too: every validation batch is scored on exactly one rank (a rank may have none)
and the sums are all-reduced once, so each logged validation figure equals the single process's.
'valid' has 15 one-sentence batches (8 on rank 0, 7 on rank 1) and 'valid1' one (none on rank 1)."""

from __future__ import annotations

import sys

import pytest
import torch

from nmt.training.distributed import free_port
from torchrun_launch import TORCHRUN, agents, clean_env, finish, node_command
from train_toy_data import make_toy_task, read_log

COMMON = ["--arch", "transformer_tiny", "--encoder-layers", "1", "--decoder-layers", "1", "--share-all-embeddings",
          "--dropout", "0", "--max-tokens", "256", "--max-update", "4", "--valid-subset", "valid,valid1",
          "--batch-size-valid", "1", "--num-threads", "1", "--log-interval", "1", "--no-progress-bar", "--lr", "1e-3",
          "--warmup-updates", "2", "--no-epoch-checkpoints"]
TRAIN = [sys.executable, "-m", "nmt.cli.train"]


def _train(commands: list[list[str]], cwd) -> None:
    with agents(commands, cwd, clean_env()) as procs:
        finish(procs)


def _weights(save_dir) -> dict[str, torch.Tensor]:
    state = torch.load(save_dir / "checkpoint_last.pt", map_location="cpu", weights_only=True)
    assert state["training"]["num_updates"] == 4
    return state["model"]


def _valid_figures(save_dir) -> dict[str, dict[str, float]]:
    """Each subset's logged validation figures (but its speed and time of day), from train_log.jsonl."""
    records = read_log(save_dir, "valid")
    assert [r["subset"] for r in records] == ["valid", "valid1"]  # one validation, when --max-update stops
    return {r["subset"]: {k: v for k, v in r.items() if k not in ("kind", "subset", "time", "wps")} for r in records}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """One process, --update-freq 2."""
    root = tmp_path_factory.mktemp("ddp")
    data = make_toy_task(root / "toy", n_train=300, n_valid=15, more_valid=(1,))
    _train([[*TRAIN, str(data), *COMMON, "--update-freq", "2", "--save-dir", str(root / "single")]], root)
    return data, _weights(root / "single"), _valid_figures(root / "single")


@pytest.mark.slow
@pytest.mark.parametrize("launcher,ddp_backend", [("spawn", "pytorch_ddp"), ("torchrun", "legacy_ddp"),
                                                  ("two-nodes", "pytorch_ddp")])
def test_two_ranks_equal_one_rank_accumulating(single, tmp_path, launcher, ddp_backend):
    data, expected, expected_valid = single
    flags = [str(data), *COMMON, "--update-freq", "1", "--ddp-backend", ddp_backend, "--save-dir",
             str(tmp_path / "ddp")]
    if launcher == "spawn":  # nmt-train starts its own 2 workers
        commands = [[*TRAIN, *flags, "--distributed-world-size", "2"]]
    elif launcher == "torchrun":  # the standard launcher; the workers read RANK / WORLD_SIZE / MASTER_*
        commands = [[*TORCHRUN, "--standalone", "--nproc_per_node", "2", "-m", "nmt.cli.train", *flags]]
    else:  # one torchrun agent per "machine", one worker each
        port = free_port()
        commands = [node_command(node, 2, port, *flags) for node in (0, 1)]
    _train(commands, tmp_path)
    got = _weights(tmp_path / "ddp")
    assert got.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-5, rtol=0, msg=name)
    assert not (tmp_path / "ddp" / "checkpoint_last.pt.tmp").exists()
    valid = _valid_figures(tmp_path / "ddp")
    for subset, figures in expected_valid.items():  # the log keeps 6 decimals
        assert valid[subset] == pytest.approx(figures, rel=1e-6, abs=2e-6), subset
