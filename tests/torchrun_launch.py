"""nmt-train under torchrun from the tests: the agents' command lines, an environment without a
parent run's RANK/MASTER_* variables, and agents that are always ended (with their workers, which
torchrun starts in sessions of their own) however a test leaves them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

TIMEOUT = 300  # seconds any one launch may take before the test fails (a hang, not a slow machine)
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
_INHERITED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "TORCHELASTIC_RESTART_COUNT", "NMT_TEST_FAULT", "NMT_TEST_FAULT_MARKER")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any distributed run's variables, one thread per process."""
    env = {k: v for k, v in os.environ.items() if k not in _INHERITED}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def node_command(node: int, nnodes: int, port: int, *train: str) -> list[str]:
    """torchrun for machine ``node`` of ``nnodes`` (one worker each), meeting on a c10d rendezvous at
    127.0.0.1:``port`` as separate machines would; ``train`` follows ``-m nmt.cli.train``."""
    return [*TORCHRUN, "--nnodes", str(nnodes), "--nproc-per-node", "1", "--node-rank", str(node),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "nmt-test",
            "--monitor-interval", "0.2", "-m", "nmt.cli.train", *train]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc), deepest last."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        out += below
        todo += below
    return out


def end(proc: subprocess.Popen) -> None:
    """SIGKILL an agent and everything it started (a no-op for what already ended)."""
    for pid in [*descendants(proc.pid), proc.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=10)


@contextlib.contextmanager
def agents(commands: list[list[str]], cwd: Path, env: dict[str, str]) -> Iterator[list[subprocess.Popen]]:
    """Start one process per command (stderr captured as text); on leaving, any still running is ended."""
    procs: list[subprocess.Popen] = []
    try:
        for cmd in commands:
            procs.append(subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          text=True))
        yield procs
    finally:
        for proc in procs:
            end(proc)


def finish(procs: list[subprocess.Popen], timeout: float = TIMEOUT) -> list[str]:
    """Wait for every process (``timeout`` seconds in all) and assert each exited 0; their stderr."""
    deadline = time.monotonic() + timeout
    errors = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{proc.args[:8]} still runs after {timeout} s") from None
        assert proc.returncode == 0, err[-3000:]
        errors.append(err)
    return errors
