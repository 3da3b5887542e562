"""Preemption: SIGTERM or SIGUSR1 makes `nmt-train` finish the update it is in, save checkpoint_last.pt and
exit 0 with one line saying how to resume; running the same command again ends exactly where a run that
was never stopped ends (parameters, Adam state, and every loss in train_log.jsonl).

Real `nmt-train` processes get real signals: from the test once the train log shows a chosen update, or
(through tests/fault_points.py) sent by the process to itself inside an update, a validation or a
checkpoint write. Two gloo workers show that a signal to one rank stops both after the same update."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from ctrl_c import ctrl_c_command
from nmt.checkpoint.format import load_checkpoint
from nmt.training import distributed, preemption
from test_input_validation import LOG_RECORD
from test_resume import assert_same_training, make_data_bin, run_to_end, train_command

pytestmark = pytest.mark.slow

MAX_UPDATE = 24
# Only the preemption writes mid-epoch checkpoints here; --max-update leaves room for a signal to land.
ARGS = ("--save-interval-updates", "0", "--max-update", str(MAX_UPDATE))
FAULT_POINTS = Path(__file__).with_name("fault_points.py")
STOP_LINE = re.compile(r"nmt-train: stopped by (.+) after update (\d+); saved (\S+); (.+)")
TIMING = {"wps", "ups", "train_wall", "wall", "time"}  # the log's figures that measure time, not training
MAX_REPEATS = 400  # signal_at(repeat_every=...) stops sending after this many repeats


def child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **extra}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID", "NMT_TEST_FAULT"):
        if var not in extra:
            env.pop(var, None)
    return env


def logged(save_dir: Path) -> list[dict]:
    """Every train-log record without its timings: what a resumed run must repeat exactly."""
    path = save_dir / "train_log.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines if line.strip()]


def logged_update(save_dir: Path) -> int:
    return max((r.get("num_updates", 0) for r in logged(save_dir)), default=0)


@dataclass
class Reference:
    """An uninterrupted run: its data, final state and train log."""

    data: Path
    save_dir: Path
    epoch_len: int

    def command(self, save_dir: Path, *extra: str) -> list[str]:
        return train_command(self.data, save_dir, *ARGS, *extra)

    def fault_command(self, save_dir: Path) -> list[str]:
        cmd = self.command(save_dir)
        return [sys.executable, str(FAULT_POINTS), *cmd[cmd.index(str(self.data)):]]


@pytest.fixture(scope="module")
def ref(tmp_path_factory) -> Reference:
    root = tmp_path_factory.mktemp("preemption")
    data = make_data_bin(root / "data-bin")
    reference = Reference(data, root / "uninterrupted", 0)
    run_to_end(reference.command(reference.save_dir))
    reference.epoch_len = load_checkpoint(reference.save_dir / "checkpoint1.pt")["training"]["num_updates"]
    assert 2 < reference.epoch_len < MAX_UPDATE // 3
    return reference


def stop_line(err: str) -> re.Match:
    """The single line besides the progress log: the stop line (no traceback, no other message)."""
    assert "Traceback" not in err, err[-3000:]
    lines = [ln for ln in err.strip().splitlines() if not LOG_RECORD.match(ln)]
    assert len(lines) == 1, err[-3000:]
    match = STOP_LINE.fullmatch(lines[0])
    assert match, lines[0]
    return match


def signal_at(cmd: list[str], save_dir: Path, update: int, *signals: int, group: bool = False,
              env: dict[str, str] | None = None, repeat_every: float = 0.0,
              from_background_job: bool = False) -> tuple[int, str]:
    """Run ``cmd``; send ``signals`` one after the other (to its whole process group with ``group``) once
    its train log records ``update``, and with ``repeat_every`` the last one again every that many seconds
    until the process ends (at most MAX_REPEATS times); returns its exit code and stderr. ``cmd`` sets the
    default SIGINT handling itself, whatever this process has (``from_background_job``: started by a parent
    ignoring SIGINT; see tests/ctrl_c.py)."""
    err_path = save_dir.parent / f"{save_dir.name}.stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(ctrl_c_command(cmd, from_background_job), stdout=subprocess.DEVNULL, stderr=err,
                                env=env or child_env(), start_new_session=group)

        def send(sig: int) -> None:
            if group:
                os.killpg(proc.pid, sig)
            else:
                os.kill(proc.pid, sig)

        try:
            deadline = time.monotonic() + 240
            while logged_update(save_dir) < update:
                assert proc.poll() is None, f"training ended before update {update}:\n{err_path.read_text()[-3000:]}"
                assert time.monotonic() < deadline, "training did not reach the update in time"
                time.sleep(0.002)
            for sig in signals:
                send(sig)
            for _ in range(MAX_REPEATS if repeat_every else 0):
                time.sleep(repeat_every)
                if proc.poll() is not None:  # not reaped before this check: the pid is still the process's
                    break
                send(signals[-1])
            proc.wait(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return proc.returncode, err_path.read_text()


def check_stopped(save_dir: Path, code: int, err: str, *signal_names: str) -> int:
    """Exit 0, the one line naming one of ``signal_names``, and checkpoint_last.pt at the update it names (no
    temp file left); returns the update."""
    assert code == 0, err[-3000:]
    match = stop_line(err)
    assert match.group(1) in signal_names
    update = int(match.group(2))
    assert Path(match.group(3)) == save_dir / "checkpoint_last.pt"
    assert 1 <= update < MAX_UPDATE
    assert load_checkpoint(save_dir / "checkpoint_last.pt")["training"]["num_updates"] == update
    assert not list(save_dir.glob(".checkpoint*.tmp"))
    return update


def check_resumes_exactly(ref: Reference, save_dir: Path) -> None:
    run_to_end(ref.command(save_dir))
    expected = load_checkpoint(ref.save_dir / "checkpoint_last.pt")
    got = load_checkpoint(save_dir / "checkpoint_last.pt")
    assert got["training"]["num_updates"] == MAX_UPDATE
    assert_same_training(expected, got, "stopped by a signal and resumed")
    assert logged(save_dir) == logged(ref.save_dir)


def test_stopped_three_times_then_rerunning_the_command_ends_as_if_never_stopped(ref, tmp_path):
    """SIGTERM inside update 1 stops after it, and a second SIGTERM during that save is ignored; SIGTERM
    during a validation lets it finish (its record is logged) and stops after the next update; SIGTERM from
    outside, mid-run; then the same command runs to the end: every stop saved exactly where the run was."""
    save_dir = tmp_path / "run"
    first = subprocess.run(ref.fault_command(save_dir), capture_output=True, text=True, timeout=240,
                           env=child_env(NMT_TEST_FAULT="signal-update:1,signal-write:1"))
    assert check_stopped(save_dir, first.returncode, first.stderr, "SIGTERM") == 1
    assert stop_line(first.stderr).group(4) == "run the same command again to resume"

    at = ref.epoch_len  # validation runs at each epoch's end
    second = subprocess.run(ref.fault_command(save_dir), capture_output=True, text=True, timeout=240,
                            env=child_env(NMT_TEST_FAULT=f"signal-valid:{at}"))
    assert check_stopped(save_dir, second.returncode, second.stderr, "SIGTERM") == at + 1
    assert [r["num_updates"] for r in logged(save_dir) if r["kind"] == "valid"] == [at]

    code, err = signal_at(ref.command(save_dir), save_dir, at + 3, signal.SIGTERM)
    assert check_stopped(save_dir, code, err, "SIGTERM") >= at + 3
    check_resumes_exactly(ref, save_dir)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1], ids=["SIGTERM", "SIGUSR1"])
def test_a_signal_repeated_until_the_process_ends_still_exits_0_with_a_sound_checkpoint(ref, tmp_path, sig):
    """A scheduler that sends the signal again every 0.15 s, through the stop's save and the process's shutdown:
    one stop, exit 0 (the default action of a repeat after the run, exit 143/138, was the bug), checkpoint_last.pt
    at the update the line names, and the same command resumes from it to the uninterrupted run's end."""
    save_dir = tmp_path / "run"
    code, err = signal_at(ref.command(save_dir), save_dir, 2, sig, repeat_every=0.15)
    assert code == 0, f"exit {code} (negative: killed by that signal)\n{err[-3000:]}"
    check_stopped(save_dir, code, err, sig.name)
    if sig == signal.SIGTERM:  # one resume is enough: the stop is the same for both signals
        check_resumes_exactly(ref, save_dir)


def test_sigusr1_and_sigterm_to_every_process_with_accumulation_and_a_loader_worker_requeue_the_job(ref, tmp_path):
    """SIGUSR1 then SIGTERM to the whole process group (as SLURM signals every process of a job step) reach
    the DataLoader worker too, which must leave them to the trainer (torch's SIGTERM handler would end it
    and fail the next batch); one stop; the saved position is a whole number of 2-batch updates;
    --requeue-on-preemption runs `scontrol requeue $SLURM_JOB_ID` (a fake one on PATH). Sent back to back,
    the two may be handled in either order: the kernel gives each to any thread of the process, and the
    one that carries SIGUSR1 can be slower to mark it (a CI run saw "stopped by SIGTERM"); which counts
    first is test_the_first_preemption_signal_counts's."""
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "scontrol-calls"
    (fake / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (fake / "scontrol").chmod(0o755)
    save_dir = tmp_path / "run"
    env = child_env(SLURM_JOB_ID="4242", PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    cmd = ref.command(save_dir, "--update-freq", "2", "--num-workers", "1", "--requeue-on-preemption")
    code, err = signal_at(cmd, save_dir, 2, signal.SIGUSR1, signal.SIGTERM, group=True, env=env)
    update = check_stopped(save_dir, code, err, "SIGUSR1", "SIGTERM")
    assert stop_line(err).group(4) == "requeued SLURM job 4242, which resumes from it when it starts again"
    assert calls.read_text() == "requeue 4242\n"
    training = load_checkpoint(save_dir / "checkpoint_last.pt")["training"]
    epoch = training["iterator"]["epoch"]
    before = max((r["num_updates"] for r in logged(save_dir) if r["kind"] == "train" and r["epoch"] < epoch), default=0)
    assert training["end_of_epoch"] or training["iterator"]["offset"] == 2 * (update - before)


@contextlib.contextmanager
def two_ranks(ref: Reference, save_dir: Path, logs_dir: Path, extra: list[tuple[str, ...]]
              ) -> Iterator[tuple[list[subprocess.Popen], list[Path]]]:
    """Rank 0 and rank 1 of one gloo run as separate nmt-train processes (``extra``: each rank's own flags);
    their stderr goes to logs_dir/rank0.stderr and rank1.stderr. Whatever still runs at the end is killed."""
    address = f"tcp://127.0.0.1:{distributed.free_port()}"
    logs = [logs_dir / f"rank{r}.stderr" for r in (0, 1)]
    procs = []
    for rank, (log, flags) in enumerate(zip(logs, extra)):
        cmd = ref.command(save_dir, "--distributed-world-size", "2", "--distributed-rank", str(rank),
                          "--distributed-init-method", address, "--ddp-timeout", "30", *flags)
        with open(log, "w") as err:
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=child_env()))
    try:
        yield procs, logs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_signal_to_one_of_two_workers_stops_both_after_the_same_update(ref, tmp_path):
    """Two gloo ranks as separate processes; only rank 1 gets SIGTERM. Both exit 0 (a rank that stopped
    alone would leave the other failing in a collective after --ddp-timeout); rank 0 saves and says so."""
    save_dir = tmp_path / "run"
    with two_ranks(ref, save_dir, tmp_path, [(), ()]) as (procs, logs):
        deadline = time.monotonic() + 240
        while logged_update(save_dir) < 2:
            assert all(p.poll() is None for p in procs), logs[0].read_text()[-3000:] + logs[1].read_text()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.002)
        procs[1].send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=120)
    err0, err1 = (log.read_text() for log in logs)
    assert procs[1].returncode == 0, err1[-3000:]
    assert check_stopped(save_dir, procs[0].returncode, err0, "a preemption signal sent to another rank") >= 2
    assert "Traceback" not in err1 and not STOP_LINE.search(err1)


def test_a_time_limit_reached_by_one_rank_stops_both_after_the_same_update(ref, tmp_path):
    """Rank 1's clock reaches --stop-time-hours at once, rank 0's never does: both stop after update 1 and exit 0
    (a rank that read only its own clock would stop alone and leave the other waiting in an all-reduce)."""
    save_dir = tmp_path / "run"
    stops = [("--stop-time-hours", "100"), ("--stop-time-hours", "1e-9")]
    with two_ranks(ref, save_dir, tmp_path, stops) as (procs, logs):
        for p in procs:
            p.wait(timeout=120)
    err0, err1 = (log.read_text() for log in logs)
    assert [p.returncode for p in procs] == [0, 0], err0[-3000:] + err1[-3000:]
    assert "done training: reached --stop-time-hours 100.0; 1 updates" in err0
    assert load_checkpoint(save_dir / "checkpoint_last.pt")["training"]["num_updates"] == 1


@pytest.mark.parametrize("from_background_job", [False, True], ids=["sigint-as-inherited", "sigint-ignored-by-parent"])
def test_ctrl_c_still_interrupts_at_once(ref, tmp_path, from_background_job):
    """SIGINT ends the run at once (exit 130, one line), also when the suite runs where SIGINT is ignored (a
    background job, a service): the child sets its own handling (tests/ctrl_c.py)."""
    save_dir = tmp_path / "run"
    code, err = signal_at(ref.command(save_dir), save_dir, 2, signal.SIGINT, from_background_job=from_background_job)
    assert code == 130, err[-3000:]
    assert err.strip().splitlines()[-1] == "nmt-train: interrupted"
    assert "Traceback" not in err


def test_a_launcher_passes_the_signals_on_to_its_workers():
    child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                              "signal.signal(signal.SIGUSR1, lambda s, f: sys.exit(7))\n"
                              "print('ready', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        with preemption.forwarded_to(lambda: [child.pid]):
            os.kill(os.getpid(), signal.SIGUSR1)  # this process survives: the handler forwards it
        assert child.wait(timeout=30) == 7
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stdout.close()


def test_the_first_preemption_signal_counts():
    """The handler keeps the first signal it gets; repeats (a scheduler signals twice, or every process
    of the job) change nothing."""
    request = preemption.StopRequest()
    assert not request.requested() and request.name() is None
    request(signal.SIGUSR1, None)
    request(signal.SIGTERM, None)
    assert request.requested() and request.name() == "SIGUSR1"


@pytest.mark.parametrize("script, env_job, expected", [
    ("exit 0", "77", "requeued SLURM job 77, which resumes from it when it starts again"),
    ("echo 'scontrol: error: Job is not requeueable' >&2; exit 1", "77",
     "scontrol requeue 77 failed (scontrol: error: Job is not requeueable); run the same command again to resume"),
    ("exit 0", None, "not requeued (--requeue-on-preemption needs SLURM_JOB_ID, which is not set); "
                     "run the same command again to resume"),
], ids=["requeued", "scontrol-fails", "not-under-slurm"])
def test_requeue_outcomes(tmp_path, monkeypatch, script, env_job, expected):
    (tmp_path / "scontrol").write_text(f"#!/bin/sh\n{script}\n")
    (tmp_path / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    if env_job is None:
        monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    else:
        monkeypatch.setenv("SLURM_JOB_ID", env_job)
    assert preemption.requeue_slurm_job() == expected


def test_the_stop_line_names_what_to_resume_from(tmp_path):
    last, interval = tmp_path / "checkpoint_last.pt", tmp_path / "checkpoint_2_9.pt"
    line = preemption.stop_line("SIGTERM", 9, [interval, last], False, "unused")
    assert line == f"nmt-train: stopped by SIGTERM after update 9; saved {last}; run the same command again to resume"
    line = preemption.stop_line("SIGUSR1", 9, [interval], True, "unused")  # --no-last-checkpoints: never requeued
    assert line.endswith(f"saved {interval}; run the same command with --restore-file {interval} to resume")
    line = preemption.stop_line("SIGTERM", 9, [], True, f"the last good checkpoint is {interval}")
    assert line.endswith(f"nothing saved at this update (--no-save or --no-last-checkpoints); the last good "
                         f"checkpoint is {interval}")
