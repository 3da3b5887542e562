"""Kill -9 and resume: `nmt-train` killed at a random update (mid-epoch) or right after an epoch's
checkpoint, then resumed, ends with exactly the parameters of a run that was never interrupted."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from nmt.checkpoint.format import load_checkpoint
from nmt.data.dictionary import Dictionary
from nmt.data.indexed_dataset import write_dataset

pytestmark = pytest.mark.slow

MAX_UPDATE = 14
SRC, TGT = "xx", "yy"


def make_data_bin(folder: Path, seed: int = 0) -> Path:
    """A reverse-the-letters task, binarized through the data API."""
    rng = random.Random(seed)
    letters = "abcdefghij"
    splits = {"train": 48, "valid": 8}
    lines = {s: [" ".join(rng.choice(letters) for _ in range(rng.randint(2, 6))) for _ in range(n)]
             for s, n in splits.items()}
    counts = Counter(tok for sents in lines.values() for line in sents for tok in line.split())
    dictionary = Dictionary.from_counts(counts)
    folder.mkdir(parents=True)
    for lang in (SRC, TGT):
        dictionary.save(folder / f"dict.{lang}.txt")
    for split, sents in lines.items():
        for lang, texts in ((SRC, sents), (TGT, [" ".join(reversed(s.split())) for s in sents])):
            write_dataset(folder / f"{split}.{SRC}-{TGT}.{lang}",
                          (dictionary.encode_ids(t) for t in texts), dictionary.dtype())
    return folder


def train_command(data: Path, save_dir: Path, *extra: str) -> list[str]:
    exe = shutil.which("nmt-train")
    head = [exe] if exe else [sys.executable, "-m", "nmt.cli.train"]
    return head + [
        str(data), "--source-lang", SRC, "--target-lang", TGT, "--arch", "transformer_tiny",
        "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
        "--decoder-ffn-embed-dim", "32", "--encoder-layers", "1", "--decoder-layers", "1",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--dropout", "0.2",
        "--optimizer", "adam", "--lr", "0.005", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4",
        "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--max-tokens", "64", "--max-update", str(MAX_UPDATE), "--seed", "7", "--save-dir", str(save_dir),
        "--save-interval-updates", "1", "--log-interval", "1", "--no-progress-bar", "--cpu", "--num-threads", "1",
        *extra,
    ]


def run_to_end(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{' '.join(cmd)}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"


def saved_updates(save_dir: Path) -> int:
    """The highest update number among the interval checkpoints written so far."""
    found = [int(m.group(1)) for p in save_dir.glob("checkpoint_*_*.pt")
             if (m := re.fullmatch(r"checkpoint_\d+_(\d+)\.pt", p.name))]
    return max(found, default=0)


def run_and_kill(cmd: list[str], ready) -> None:
    """Start training, SIGKILL it as soon as ``ready()`` is true; it must not have finished by itself."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    try:
        while not ready():
            if proc.poll() is not None:
                tail = proc.stderr.read()[-3000:]
                pytest.fail(f"training ended (exit {proc.returncode}) before the kill point:\n{tail}")
            assert time.monotonic() < deadline, "training did not reach the kill point in time"
            time.sleep(0.002)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None and time.monotonic() >= deadline:
            proc.kill()
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, f"training was not killed (exit {proc.returncode})"


def final_state(save_dir: Path) -> dict:
    state = load_checkpoint(save_dir / "checkpoint_last.pt")
    assert state["training"]["num_updates"] == MAX_UPDATE
    return state


def assert_same_training(expected: dict, got: dict, what: str) -> None:
    assert expected["model"].keys() == got["model"].keys()
    for name, tensor in expected["model"].items():
        assert torch.equal(tensor, got["model"][name]), f"{what}: parameter {name} differs from the uninterrupted run"
    exp_opt, got_opt = expected["training"]["optimizer"]["state"], got["training"]["optimizer"]["state"]
    for key in exp_opt:
        for slot, value in exp_opt[key].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(got_opt[key][slot])), f"{what}: optimizer {slot}"


def untouched(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_ino, stat.st_mtime_ns


@dataclass
class Scenario:
    """An uninterrupted run's final state, and a copy of the same run killed at a random update of epoch 2+."""

    data: Path
    args: tuple[str, ...]  # extra nmt-train options of both runs
    expected: dict
    epoch_len: int  # updates per epoch
    killed: Path
    kill_at: int

    def command(self, save_dir: Path, *extra: str) -> list[str]:
        return train_command(self.data, save_dir, *self.args, *extra)


def kill_scenario(root: Path, *args: str) -> Scenario:
    data = make_data_bin(root / "data-bin")
    run_to_end(train_command(data, root / "uninterrupted", *args))
    epoch_len = load_checkpoint(root / "uninterrupted" / "checkpoint1.pt")["training"]["num_updates"]
    assert 2 < epoch_len < MAX_UPDATE - 4, f"the test needs several epochs of several updates, got {epoch_len}"
    kill_at = random.SystemRandom().choice([k for k in range(epoch_len + 1, MAX_UPDATE - 1) if k % epoch_len])
    killed = root / "killed"
    run_and_kill(train_command(data, killed, *args), lambda: saved_updates(killed) >= kill_at)
    return Scenario(data, args, final_state(root / "uninterrupted"), epoch_len, killed, kill_at)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Scenario:
    return kill_scenario(tmp_path_factory.mktemp("resume"))


def resume_copy(run: Scenario, to: Path, *extra: str) -> dict:
    """Resume a copy of the killed run's folder to the end; it must not start again from scratch."""
    shutil.copytree(run.killed, to)
    first = to / "checkpoint_1_1.pt"
    before = untouched(first)
    run_to_end(run.command(to, *extra))
    assert untouched(first) == before, "the resumed run started again from scratch"
    return final_state(to)


def check_mid_epoch_resume(run: Scenario, to: Path) -> None:
    resumed_from = load_checkpoint(run.killed / "checkpoint_last.pt")["training"]["num_updates"]
    # The kill may land between writing checkpoint_<e>_<kill_at>.pt and re-linking checkpoint_last.pt.
    assert run.kill_at - 1 <= resumed_from < MAX_UPDATE
    extra: tuple[str, ...] = ()  # resume from checkpoint_last.pt by itself ...
    if resumed_from % run.epoch_len == 0:  # ... unless the kill came late, on an epoch end: take the mid-epoch one
        resumed_from = run.kill_at
        extra = ("--restore-file", f"checkpoint_{(run.kill_at - 1) // run.epoch_len + 1}_{run.kill_at}.pt")
    got = resume_copy(run, to, *extra)
    assert_same_training(run.expected, got, f"killed at update {run.kill_at}, resumed from update {resumed_from}")


def test_killed_mid_epoch_and_resumed_matches_uninterrupted(runs, tmp_path):
    check_mid_epoch_resume(runs, tmp_path / "run")


def test_killed_and_resumed_from_an_epoch_boundary_matches(runs, tmp_path):
    boundary = load_checkpoint(runs.killed / "checkpoint1.pt")["training"]
    assert boundary["end_of_epoch"] and boundary["num_updates"] == runs.epoch_len
    got = resume_copy(runs, tmp_path / "run", "--restore-file", "checkpoint1.pt")
    assert_same_training(runs.expected, got, "resumed from the end of epoch 1")


def test_killed_mid_epoch_with_update_freq_2_matches(tmp_path):
    """Gradient accumulation: the saved position is a whole number of updates' batches."""
    check_mid_epoch_resume(kill_scenario(tmp_path, "--update-freq", "2"), tmp_path / "run")


def test_corrupted_last_checkpoint_stops_nmt_train_naming_the_previous_good_one(runs, tmp_path):
    save_dir = tmp_path / "run"
    shutil.copytree(runs.killed, save_dir)
    last = save_dir / "checkpoint_last.pt"
    data_bytes = last.read_bytes()
    newest = max(load_checkpoint(p)["training"]["num_updates"] for p in save_dir.glob("checkpoint*.pt") if p != last)
    last.unlink()
    last.write_bytes(data_bytes[: len(data_bytes) // 3])  # a half-copied file
    done = subprocess.run(runs.command(save_dir), capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stderr[-3000:]
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("nmt-train: error: checkpoint") and "truncated or corrupted" in error
    named = re.search(r"--restore-file (\S+)$", error)
    assert named, error
    assert load_checkpoint(named.group(1))["training"]["num_updates"] == newest  # the newest good one
