"""One nmt-train run per --save-dir: a second run on a folder in use fails at once, in one line naming
the folder and the pid of the run holding it, and changes nothing there; the lock dies with its holder,
so after a SIGKILL the next run resumes. Spawned workers of one run share the launcher's lock."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nmt.checkpoint.save_dir import LOCK_NAME, hold_save_dir
from nmt.errors import NmtError
from train_toy_data import make_toy_task

FAULT_POINTS = Path(__file__).with_name("fault_points.py")


def test_a_held_save_dir_refuses_a_second_holder_and_is_free_again_after(tmp_path):
    save = tmp_path / "run" / "deeper"
    with hold_save_dir(save) as folder:
        assert folder == save and (save / LOCK_NAME).read_text().strip() == str(os.getpid())
        with pytest.raises(NmtError) as info:  # this process is refused too
            with hold_save_dir(save):
                pass
        assert str(info.value) == (f"--save-dir {save} is in use by another nmt-train run (pid {os.getpid()}); "
                                   "wait for it to finish or stop it, or pass another --save-dir")
    with hold_save_dir(save):  # released when the block ends
        pass


def train_args(data: Path, save: Path, *extra: str, max_update: int = 4) -> list[str]:
    return [str(data), "--arch", "transformer_tiny", "--encoder-layers", "1", "--decoder-layers", "1",
            "--share-all-embeddings", "--max-tokens", "128", "--max-update", str(max_update),
            "--save-interval-updates", "1", "--keep-interval-updates", "2",
            "--disable-validation", "--save-dir", str(save), "--seed", "3", "--no-progress-bar", "--cpu",
            "--num-threads", "1", *extra]


def env(**extra: str) -> dict[str, str]:
    out = {**os.environ, "OMP_NUM_THREADS": "1", **extra}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "NMT_TEST_FAULT"):
        out.pop(var, None)
    return {**out, **extra}


def start_blocked(data: Path, save: Path, marker: Path, *extra: str) -> subprocess.Popen:
    """nmt-train (through tests/fault_points.py) that stops inside update 2 and waits there, holding the lock;
    in a process group of its own, so that :func:`kill` reaches spawned workers too."""
    proc = subprocess.Popen([sys.executable, str(FAULT_POINTS), *train_args(data, save, *extra)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=env(NMT_TEST_FAULT="block-update:2", NMT_TEST_FAULT_MARKER=str(marker)))
    deadline = time.monotonic() + 300
    while not marker.exists():
        if proc.poll() is not None:
            pytest.fail(f"the first run ended (exit {proc.returncode}) before update 2:\n{proc.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, "the first run did not reach update 2"
        time.sleep(0.02)
    return proc


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL the run and every process it started."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def train(data: Path, save: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nmt.cli.train", *train_args(data, save, *extra)],
                          capture_output=True, text=True, env=env(), timeout=300)


def sha256s(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.is_file()}


def assert_refused(done: subprocess.CompletedProcess, save: Path, holder: int) -> None:
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert errors == [f"nmt-train: error: --save-dir {save} is in use by another nmt-train run (pid {holder}); "
                      "wait for it to finish or stop it, or pass another --save-dir"], done.stderr[-3000:]
    assert "resumed from" not in done.stderr and "model transformer_tiny" not in done.stderr  # failed at once


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_toy_task(tmp_path_factory.mktemp("lock"), n_train=80, n_valid=8)


@pytest.mark.slow  # three nmt-train processes
def test_a_second_run_on_a_save_dir_in_use_fails_and_a_killed_holder_blocks_nothing(data, tmp_path):
    save = tmp_path / "run"
    first = start_blocked(data, save, tmp_path / "marker")
    try:
        before = sha256s(save)
        assert "checkpoint_1_1.pt" in before  # the first run has saved once and is inside update 2
        assert_refused(train(data, save), save, first.pid)
        assert sha256s(save) == before  # nothing in the folder changed
    finally:
        kill(first)
    assert first.returncode == -signal.SIGKILL
    resumed = train(data, save)  # the lock died with the killed run
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr and "update 1" in resumed.stderr


@pytest.mark.slow  # a run of two spawned gloo workers and a second run
def test_spawned_workers_share_the_launchers_lock(data, tmp_path):
    """The fault points do not reach spawned workers, so the first run is simply long: it is killed once
    the second has been refused."""
    save = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "nmt.cli.train", "--distributed-world-size", "2",
                              *train_args(data, save, max_update=100_000)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True, env=env())
    try:
        deadline = time.monotonic() + 300
        while not list(save.glob("checkpoint_*_*.pt")):  # the workers train (they do not lock it again)
            if first.poll() is not None:
                pytest.fail(f"the spawned run ended (exit {first.returncode}):\n{first.stderr.read()[-3000:]}")
            assert time.monotonic() < deadline, "the spawned run saved no checkpoint"
            time.sleep(0.05)
        assert_refused(train(data, save), save, first.pid)  # the launcher holds the lock
        assert first.poll() is None
    finally:
        kill(first)
