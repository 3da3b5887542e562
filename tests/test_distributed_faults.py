"""Distributed faults: when one of two gloo workers dies or hangs, the other exits non-zero with one
line (after at most --ddp-timeout seconds) instead of waiting forever, and the run resumes from the
last checkpoint. The two workers are separate `nmt-train` processes meeting on a tcp:// address, as
on two machines (a launcher such as torchrun would kill the survivor itself and hide a hang)."""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.checkpoint.format import load_checkpoint
from nmt.config.train import DistributedTrainingConfig
from nmt.training import distributed
from train_toy_data import make_toy_task

FAULT_POINTS = Path(__file__).with_name("fault_points.py")
DDP_TIMEOUT = 8  # seconds; the hang detector below (the subprocess timeout) is much longer
HANG = 120


def train_args(data: Path, save_dir: Path) -> list[str]:
    return [str(data), "--arch", "transformer_tiny", "--encoder-layers", "1", "--decoder-layers", "1",
            "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
            "--decoder-ffn-embed-dim", "32", "--share-all-embeddings", "--dropout", "0", "--max-tokens", "128",
            "--max-update", "6", "--save-interval-updates", "1", "--disable-validation", "--save-dir", str(save_dir),
            "--seed", "3", "--no-progress-bar", "--cpu", "--num-threads", "1", "--ddp-timeout", str(DDP_TIMEOUT)]


def env(fault: str | None = None) -> dict[str, str]:
    out = {**os.environ, "OMP_NUM_THREADS": "1"}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "NMT_TEST_FAULT"):
        out.pop(var, None)
    if fault:
        out["NMT_TEST_FAULT"] = fault
    return out


def two_workers(data: Path, save_dir: Path, fault: str) -> tuple[subprocess.Popen, subprocess.Popen]:
    """Ranks 0 and 1 as separate processes; ``fault`` (KIND:UPDATE:RANK) is planted in both, fires in one."""
    address = f"tcp://127.0.0.1:{distributed.free_port()}"
    return tuple(subprocess.Popen(  # type: ignore[return-value]
        [sys.executable, str(FAULT_POINTS), *train_args(data, save_dir), "--distributed-world-size", "2",
         "--distributed-rank", str(rank), "--distributed-init-method", address],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env(fault)) for rank in (0, 1))


def survivor_error(survivor: subprocess.Popen, other: subprocess.Popen) -> str:
    """Rank 0's last stderr line once it has exited (the test fails if it hangs); the other is then killed."""
    try:
        _, err = survivor.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        survivor.kill()
        pytest.fail(f"rank 0 still waits {HANG} s after rank 1 failed (--ddp-timeout {DDP_TIMEOUT})")
    finally:
        if other.poll() is None:
            other.kill()
        other.communicate()
    assert survivor.returncode == 1, err[-3000:]
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_toy_task(tmp_path_factory.mktemp("ddp-faults"), n_train=200, n_valid=8)


@pytest.mark.slow  # 2 + 2 nmt-train processes
def test_a_dead_worker_stops_the_other_with_one_line_and_the_run_resumes(data, tmp_path):
    save_dir = tmp_path / "ckpt"
    rank0, rank1 = two_workers(data, save_dir, "exit:4:1")  # rank 1 dies (os._exit) at the start of update 4
    error = survivor_error(rank0, rank1)
    assert rank1.returncode == 3
    assert error.startswith("nmt-train: error: rank 0: a collective with the other workers failed"), error
    assert f"--ddp-timeout {DDP_TIMEOUT} s" in error
    assert error.endswith(f"(the last good checkpoint is {save_dir / 'checkpoint_1_3.pt'})"), error
    assert load_checkpoint(save_dir / "checkpoint_last.pt")["training"]["num_updates"] == 3

    exe = shutil.which("nmt-train")
    head = [exe] if exe else [sys.executable, "-m", "nmt.cli.train"]
    resumed = subprocess.run([*head, *train_args(data, save_dir), "--distributed-world-size", "2"],
                             capture_output=True, text=True, env=env(), timeout=HANG)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "update 3" in next(line for line in resumed.stderr.splitlines() if "resumed from" in line)
    assert load_checkpoint(save_dir / "checkpoint_last.pt")["training"]["num_updates"] == 6


@pytest.mark.slow  # waits --ddp-timeout
def test_a_hung_worker_makes_the_other_fail_after_the_ddp_timeout(data, tmp_path):
    rank0, rank1 = two_workers(data, tmp_path / "ckpt", "stall:4:1")  # rank 1 hangs at update 4
    error = survivor_error(rank0, rank1)
    assert error.startswith("nmt-train: error: rank 0: a collective with the other workers failed"), error
    assert "timed out" in error.lower() and f"--ddp-timeout {DDP_TIMEOUT} s" in error


def test_ddp_timeout_is_given_to_the_process_group(monkeypatch):
    seen = {}
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda *a, **kw: seen.update(kw))
    cfg = DistributedTrainingConfig(distributed_world_size=2, distributed_rank=1, cpu=True, num_threads=1,
                                    distributed_init_method="tcp://127.0.0.1:1", ddp_timeout=42)
    ctx = distributed.init(cfg)
    assert ctx.rank == 1 and seen["timeout"] == datetime.timedelta(seconds=42)


def test_only_collective_failures_become_one_line_errors():
    ctx = distributed.DistributedContext(rank=1, world_size=2)
    gloo = RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:1234")
    error = distributed.collective_failure(gloo, ctx, 30, "hint")
    assert error is not None and "rank 1" in str(error) and "Connection closed by peer" in str(error)
    assert "pair.cc" not in str(error) and "--ddp-timeout 30 s" in str(error)
    assert distributed.collective_failure(RuntimeError("shape mismatch"), ctx, 30, "hint") is None  # a bug: traceback
    assert distributed.collective_failure(gloo, distributed.DistributedContext(), 30, "hint") is None


def test_ranks_resuming_from_different_checkpoints_are_refused(monkeypatch):
    """On several machines without a shared --save-dir rank 0 would resume while another rank starts afresh."""
    from types import SimpleNamespace

    from nmt.errors import NmtError
    from nmt.training.loop import TrainingRun

    run = SimpleNamespace(ctx=distributed.DistributedContext(rank=1, world_size=2),
                          cfg=SimpleNamespace(checkpoint=SimpleNamespace(save_dir="ckpt")))
    monkeypatch.setattr(distributed, "all_gather_object", lambda value: [4, value])
    TrainingRun._check_same_start(run, {"num_updates": 4})  # both at update 4: fine
    with pytest.raises(NmtError, match=r"--save-dir ckpt: the ranks resume from different checkpoints "
                                       r"\(rank 0 at update 4, rank 1 found none\); .* shared filesystem"):
        TrainingRun._check_same_start(run, None)
