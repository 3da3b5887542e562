"""Running nmt's command-line tools from a study: each command shown and logged as it runs, a training stopped
by a signal treated as unfinished, the precision and thread flags of a run, and the names a study was asked for."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Collection

import click

from nmt.errors import NmtError, UsageError
from nmt.hardware import bf16_is_faster, cores_per_process
from nmt.training.preemption import STOP_LINE_START


def tool(name: str) -> str:
    """The path of an nmt console script; a usage error when nmt is not installed."""
    path = shutil.which(name)
    if path is None:
        raise UsageError(f"{name}: not on PATH; install nmt first (scripts/install.sh or pip install -e .)")
    return path


def call(argv: list[str], tag: str = "") -> str:
    """Run a command with its output shown live, each line after ``tag`` (which run it is, when several run at
    once); returns its stdout + stderr for parsing."""
    click.echo(f"{tag}$ " + shlex.join(argv))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:  # type: ignore[union-attr]
        sys.stdout.write(tag + line)
        lines.append(line)
    if proc.wait() != 0:
        raise NmtError(f"{Path(argv[0]).name} failed (exit {proc.returncode}); its output is above")
    return "".join(lines)


STOPPED = re.compile(f"^{re.escape(STOP_LINE_START)}.*$", re.MULTILINE)  # a preempted nmt-train's last line


def train_to_end(argv: list[str], tag: str = "") -> None:
    """Run an nmt-train command to its end. A training stopped by a signal saves checkpoint_last.pt and exits 0
    (preemption); here that is an error, so that a half-trained model is never scored as a finished run: running
    the study again resumes it."""
    stopped = STOPPED.search(call(argv, tag))
    if stopped is not None:
        raise NmtError(f"{stopped.group(0)} (not scored: a run stopped before its end is not a finished one)")


def precision_flags(precision: str) -> list[str]:
    """The nmt-train / nmt-generate flags of --precision (auto: bf16 where it is measured faster than fp32)."""
    return ["--bf16"] if precision == "bf16" or (precision == "auto" and bf16_is_faster()) else []


def thread_flags(option: str, share: int) -> list[str]:
    """``option`` (nmt-train's --num-threads, nmt-generate's --threads) giving one of ``share`` processes that run
    at once its part of the cores; nothing for a process alone (the tools' own default uses them all)."""
    return [] if share == 1 else [option, str(cores_per_process(share))]


def chosen(option: str, given: str, known: Collection[str], data: str) -> list[str]:
    """The comma-separated names of ``option``, each one of ``known``; the data-bin must exist."""
    names = [v.strip() for v in given.split(",") if v.strip()]
    unknown = [v for v in names if v not in known]
    if unknown or not names:
        raise UsageError(f"{option} {given}: unknown {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(known)}")
    if not Path(data).is_dir():
        raise UsageError(f"data-bin {data}: no such folder; run scripts/quickstart.sh first (it writes "
                         "data-bin/multi30k_en_de) or give the folder")
    return names
