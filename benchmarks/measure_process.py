"""Wall time, CPU time and peak memory of a command and everything it starts, for the benchmarks.

Two peaks are reported, because tools split work over processes differently:

- ``largest_mb``: the peak RSS of the largest single process (what ``/usr/bin/time -v`` reports);
- ``tree_mb``: the peak of the RSS *summed* over the whole process tree, sampled every 50 ms from
  /proc (a short spike between samples can be missed; shared pages are counted once per process).

The command runs under a tiny fresh helper process, so the peak of this (larger) Python process does
not leak into ``ru_maxrss`` through fork + exec.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from nmt.errors import NmtError

_HELPER = ("import resource, subprocess, sys, time\n"
           "out = open(sys.argv[1], 'w') if sys.argv[1] else subprocess.DEVNULL\n"
           "t = time.perf_counter(); p = subprocess.run(sys.argv[2:], stdout=out)\n"
           "wall = time.perf_counter() - t\n"
           "r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
           "print(wall, r.ru_maxrss / 1024, r.ru_utime + r.ru_stime, p.returncode, file=sys.stderr)\n")


@dataclass
class Measured:
    wall_s: float
    largest_mb: float
    tree_mb: float
    cpu_s: float
    stderr: str = ""  # what the command printed there

    def __str__(self) -> str:
        return (f"{self.wall_s:8.1f} s wall, {self.cpu_s:8.1f} s CPU, peak RSS {self.largest_mb:7.0f} MB "
                f"(largest process), {self.tree_mb:7.0f} MB (process tree)")


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    return kids


def tree_rss_mb(root: int) -> float:
    """RSS summed over the descendants of ``root`` (not ``root`` itself), in MB."""
    kids, total = _children(), 0
    todo = list(kids.get(root, []))
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


@contextlib.contextmanager
def peak_tree_rss(root: int) -> Iterator[list[float]]:
    """While the block runs, sample the RSS summed over ``root``'s descendants every 50 ms; the
    yielded list's one item holds the peak in MB."""
    peak, done = [0.0], threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], tree_rss_mb(root))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()


def measure(cmd: list[str], *, stdout: Path | None = None, env: dict[str, str] | None = None) -> Measured:
    """Run ``cmd`` (stdout to the file ``stdout`` or discarded, stderr captured) and measure it; an NmtError with
    the command's last stderr line when it fails. A shell pipeline is ``["bash", "-c", "..."]``."""
    proc = subprocess.Popen([sys.executable, "-c", _HELPER, str(stdout or ""), *cmd], stderr=subprocess.PIPE,
                            text=True, env=env)
    with peak_tree_rss(proc.pid) as peak:  # the helper's children: the command
        _, err = proc.communicate()
    *output, last = err.rstrip("\n").split("\n")
    wall, largest, cpu, code = last.split()
    if int(code) != 0:
        print("\n".join(output[-20:]), file=sys.stderr)
        raise NmtError(f"{' '.join(cmd[:3])} ... failed ({code}): {(output or ['(no output)'])[-1]}")
    return Measured(float(wall), float(largest), max(peak[0], float(largest)), float(cpu), "\n".join(output))
