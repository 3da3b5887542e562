"""Private work folders beside an output folder, and what happens to them when a run is stopped.

A work folder is named ``.NAME.tmp-XXXX`` (the output being built) or ``.NAME.old-XXXX`` (the
output being replaced) and holds an owner file naming the process that made it. SIGTERM is turned
into the same interruption as Ctrl-C, so the ``except``/``finally`` blocks that remove the folder
run. A run killed outright (SIGKILL, power loss) leaves its folder behind: the next run removes
it, but only a folder with a valid owner file whose process is gone (never a folder it cannot
prove it made, nor one of a run still going on).

The signal handling lives in :mod:`nmt.signals`, shared with nmt-train's preemption.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

from nmt.fileio import atomic_write_text

OWNER_FILE = ".nmt-owner.json"
KINDS = ("tmp", "old")


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (Linux), to tell a reused pid from the original."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]  # field 22, counted after the "(comm)" field


def _owner() -> dict[str, Any]:
    pid = os.getpid()
    return {"program": "nmt", "pid": pid, "start": process_start_time(pid), "host": socket.gethostname()}


def new_work_dir(beside: Path, kind: str) -> Path:
    """A private folder ``.NAME.KIND-XXXX`` in ``beside``'s folder (same file system: renames are
    atomic), holding the owner file."""
    folder = Path(tempfile.mkdtemp(prefix=f".{beside.name}.{kind}-", dir=beside.parent))
    atomic_write_text(folder / OWNER_FILE, json.dumps(_owner()) + "\n")
    return folder


def release(folder: Path) -> None:
    """Remove the owner file: ``folder`` is about to become the output itself."""
    with contextlib.suppress(FileNotFoundError):
        (folder / OWNER_FILE).unlink()


def _owner_gone(folder: Path) -> int | None:
    """The pid that made ``folder`` when the owner file is ours and that process no longer runs;
    None when the folder is not provably ours or its process may still be running."""
    marker = folder / OWNER_FILE
    try:
        if marker.is_symlink() or marker.stat().st_size > 4096:
            return None
        owner = json.loads(marker.read_text(encoding="utf-8"))
        pid = owner["pid"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if owner.get("program") != "nmt" or not isinstance(pid, int) or owner.get("host") != socket.gethostname():
        return None  # a run on another machine sharing this folder cannot be checked from here
    if pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return pid
    except PermissionError:
        return None  # alive, another user's
    started = process_start_time(pid)
    return pid if owner.get("start") and started and started != owner["start"] else None  # pid reused


def clean_leftovers(beside: Path) -> list[tuple[Path, int]]:
    """Remove the work folders of ``beside`` left by runs that were killed; returns (folder, pid) of each."""
    removed = []
    for kind in KINDS:
        for folder in beside.parent.glob(f".{beside.name}.{kind}-*"):
            if folder.is_symlink() or not folder.is_dir():
                continue
            pid = _owner_gone(folder)
            if pid is not None:
                shutil.rmtree(folder, ignore_errors=True)
                if not folder.exists():
                    removed.append((folder, pid))
    return removed
