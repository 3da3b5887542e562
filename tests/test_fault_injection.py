"""SIGKILL `nmt-train` at 5 seeded random moments (inside an update, inside validation, halfway
through a checkpoint write, between a checkpoint's rename and its links), resume after each, and
end with exactly the parameters of a run that was never interrupted.

How the kills land in a phase: the killed runs are `nmt-train` started through tests/fault_points.py,
which wraps the trainer and the checkpoint writer so that, at the chosen update, the process writes a
marker file and waits *inside* that phase; the test sees the marker and sends SIGKILL. The reference
run is the plain `nmt-train` console script.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from nmt.checkpoint.format import load_checkpoint
from train_toy_data import make_toy_task

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("NMT_FAULT_SEED", "2026"))  # which moments are chosen (set it to explore others)
MAX_UPDATE = 18
VALIDATE_EVERY = 3
FAULT_POINTS = Path(__file__).with_name("fault_points.py")
KINDS = ["block-update", "block-valid", "block-write", "block-link"]


def train_args(data: Path, save_dir: Path, *extra: str) -> list[str]:
    """The runs' options; ``extra`` goes last (click keeps a repeated flag's last value)."""
    return [str(data), "--arch", "transformer_tiny", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
            "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32", "--encoder-layers", "1",
            "--decoder-layers", "1", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
            "--share-all-embeddings", "--dropout", "0.2", "--lr", "0.005", "--warmup-updates", "4",
            "--max-tokens", "96", "--max-update", str(MAX_UPDATE), "--seed", "7", "--save-dir", str(save_dir),
            "--save-interval-updates", "1", "--validate-interval-updates", str(VALIDATE_EVERY),
            "--log-interval", "1", "--no-progress-bar", "--cpu", "--num-threads", "1", *extra]


def child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **extra}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    return env


def kill_plan(seed: int) -> list[tuple[str, int]]:
    """5 (kind, update) moments in increasing update order, one per window of 3 updates; every kind at least once."""
    rng = random.Random(seed)
    kinds = KINDS + [rng.choice(KINDS)]
    rng.shuffle(kinds)
    plan = []
    for i, kind in enumerate(kinds):
        window = list(range(3 * i + 2, 3 * i + 5))  # from update 2: a kill in update 1 has nothing to resume
        if kind == "block-valid":  # validation runs after every VALIDATE_EVERY-th update
            window = [u for u in window if u % VALIDATE_EVERY == 0]
        plan.append((kind, rng.choice(window)))
    return plan


def kill_inside(data: Path, save_dir: Path, kind: str, update: int, log: Path, *extra: str) -> None:
    """Run nmt-train with fault ``kind`` at ``update``; SIGKILL it once it waits inside that phase."""
    marker = save_dir.parent / f"marker-{kind}-{update}"
    env = child_env(NMT_TEST_FAULT=f"{kind}:{update}", NMT_TEST_FAULT_MARKER=str(marker))
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, str(FAULT_POINTS), *train_args(data, save_dir, *extra)],
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
        deadline = time.monotonic() + 120
        try:
            while not marker.exists():
                if proc.poll() is not None:
                    pytest.fail(f"{kind} at update {update}: nmt-train ended (exit {proc.returncode}) before the "
                                f"fault point:\n{log.read_text()[-3000:]}")
                assert time.monotonic() < deadline, f"{kind} at update {update}: fault point not reached in time"
                time.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            if proc.poll() is None and not marker.exists():
                proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL


def resumed_at(log: Path) -> int | None:
    found = re.search(r"resumed from \S+ at epoch \d+, update (\d+)", log.read_text())
    return int(found.group(1)) if found else None


def final_state(save_dir: Path) -> dict:
    state = load_checkpoint(save_dir / "checkpoint_last.pt")
    assert state["training"]["num_updates"] == MAX_UPDATE
    return state


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_toy_task(tmp_path_factory.mktemp("faults"), n_train=60, n_valid=16, vocab=12, max_len=7)


def kill_resume_and_compare(data: Path, tmp_path: Path, plan: list[tuple[str, int]], *extra: str) -> None:
    """Kill a run at each moment of ``plan`` and resume it; at the end its parameters and Adam state must
    equal those of an uninterrupted run (the plain console script, started beside the killed runs)."""
    exe = shutil.which("nmt-train")
    reference_cmd = ([exe] if exe else [sys.executable, "-m", "nmt.cli.train"]) + train_args(data, tmp_path / "ref",
                                                                                              *extra)
    # The reference run goes on beside the killed runs (two cores in CI).
    reference = subprocess.Popen(reference_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 env=child_env())
    killed = tmp_path / "killed"
    previous = 0  # the update each resumed run must at least start from
    for i, (kind, update) in enumerate(plan):
        log = tmp_path / f"run{i}.log"
        kill_inside(data, killed, kind, update, log, *extra)
        assert (resumed_at(log) or 0) == previous, f"run {i} did not resume from update {previous}"
        # Killed inside update U, its validation, or U's checkpoint write (before checkpoint_last.pt is
        # relinked): checkpoint_last.pt still holds update U - 1, and every checkpoint name holds a whole file.
        last = load_checkpoint(killed / "checkpoint_last.pt")["training"]["num_updates"]
        assert last == update - 1, f"{kind} at update {update} left checkpoint_last.pt at update {last}"
        for path in killed.glob("checkpoint*.pt"):
            load_checkpoint(path)
        if kind == "block-write":  # the kill landed mid-write: the half-written temp file is still there
            assert list(killed.glob(".checkpoint*.tmp")), "no half-written temp file: the kill missed the save"
        previous = last
    done = subprocess.run([sys.executable, str(FAULT_POINTS), *train_args(data, killed, *extra)],
                          capture_output=True, text=True, env=child_env(), timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not list(killed.glob(".checkpoint*.tmp")), "a killed save's temp file was not cleaned up"
    _, ref_err = reference.communicate(timeout=240)
    assert reference.returncode == 0, ref_err[-3000:]

    expected, got = final_state(tmp_path / "ref"), final_state(killed)
    assert expected["model"].keys() == got["model"].keys()
    for name, tensor in expected["model"].items():
        assert torch.equal(tensor, got["model"][name]), f"parameter {name} differs after the kills {plan}"
    exp_opt, got_opt = expected["training"]["optimizer"]["state"], got["training"]["optimizer"]["state"]
    for key, slots in exp_opt.items():
        for slot, value in slots.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(got_opt[key][slot])), f"optimizer {slot}"


def test_five_kills_resume_to_the_uninterrupted_parameters(data, tmp_path):
    plan = kill_plan(SEED)
    assert {k for k, _ in plan} == set(KINDS)  # inside an update, a validation, a write, before the links
    kill_resume_and_compare(data, tmp_path, plan)


def test_kills_with_a_dataloader_worker_resume_to_the_uninterrupted_parameters(data, tmp_path):
    """--num-workers 1 with dropout: starting the worker DataLoader of a resumed epoch must not shift the
    dropout masks (it used to draw its workers' seed from torch's global generator). Both kills are mid-epoch
    (5 updates per epoch), where a resumed run starts a DataLoader that the uninterrupted run did not."""
    kill_resume_and_compare(data, tmp_path, [("block-update", 4), ("block-valid", 9)],
                            "--num-workers", "1", "--dropout", "0.1")
    epoch_end = load_checkpoint(tmp_path / "ref" / "checkpoint1.pt")["training"]
    assert epoch_end["num_updates"] == 5, "the kills were meant to land mid-epoch"


def test_kill_plan_covers_every_phase_in_increasing_order():
    for seed in range(50):
        plan = kill_plan(seed)
        updates = [u for _, u in plan]
        assert len(plan) == 5 and updates == sorted(set(updates)) and max(updates) < MAX_UPDATE
        assert set(KINDS) <= {k for k, _ in plan}
        assert all(u % VALIDATE_EVERY == 0 for k, u in plan if k == "block-valid")
