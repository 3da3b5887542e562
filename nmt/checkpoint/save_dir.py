"""The ``--save-dir`` of a training run: created when missing, and held by one run at a time.

Two runs writing one save dir would overwrite each other's ``checkpoint_last.pt`` and resume from
each other's states. So a run holds an OS lock on ``.nmt-train.lock`` inside it for as long as it runs;
the file holds the holder's pid for the error message. It is a POSIX record lock (``fcntl.lockf``):
it belongs to the process, so forked data-loader workers do not inherit it (a ``flock`` would live on
in a worker that outlives a killed run), and the kernel drops it when the process ends in any way
(SIGKILL included), so a dead run never blocks the next one and
there is nothing to clean up. One job takes it once: the launcher of spawned workers, or rank 0. A run
that fails before writing anything removes the folders it created, so a bad flag or a damaged
data-bin leaves no empty save dir behind.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path
from typing import Iterator

from nmt.errors import NmtError, UsageError

LOCK_NAME = ".nmt-train.lock"


def make_save_dir(save_dir: str | os.PathLike) -> Path:
    """``save_dir``, created with its parents when missing; a path that is (or runs through) a file fails."""
    folder = Path(save_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in [folder, *folder.parents] if p.exists() and not p.is_dir()), folder)
        raise UsageError(f"--save-dir {folder}: {blocker} is a file, not a folder; pass a folder path "
                         "(it is created when missing)") from None
    except PermissionError:
        raise UsageError(f"--save-dir {folder}: permission denied; pass a folder you can write to") from None
    return folder


def _holder(fd: int) -> str:
    """The pid the current holder wrote into the lock file ("pid unknown" while it is still writing it)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(os.pread(fd, 32, 0).decode().strip())
        return f"pid {pid}"
    return "pid unknown"


_held: set[str] = set()  # save dirs this process holds: a POSIX lock does not refuse its own process


def _in_use(folder: Path, holder: str) -> NmtError:
    return NmtError(f"--save-dir {folder} is in use by another nmt-train run ({holder}); wait for it to finish "
                    "or stop it, or pass another --save-dir")


@contextlib.contextmanager
def hold_save_dir(save_dir: str | os.PathLike) -> Iterator[Path]:
    """Create ``save_dir`` and hold its lock for the ``with`` block; another holder fails at once in one
    line naming the folder and the holder's pid."""
    created = [p for p in [Path(save_dir), *Path(save_dir).parents] if not p.exists()]  # deepest first
    folder = make_save_dir(save_dir)
    path = folder / LOCK_NAME
    key = os.path.realpath(path)
    if key in _held:  # checked before opening: closing a second descriptor would drop this process's lock
        raise _in_use(folder, f"pid {os.getpid()}")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise UsageError(f"--save-dir {folder}: cannot create its lock file {LOCK_NAME} ({e.strerror}); pass a "
                         "folder you can write to") from None
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise _in_use(folder, _holder(fd)) from None
        # The pid is written in place, not with atomic_write: renaming a new file over this one would
        # give the next run a different file to lock while this run still holds the old one.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _held.add(key)
        try:
            yield folder
        except BaseException:
            _remove_if_untouched(created, path)  # a run that failed before writing leaves nothing behind
            raise
        finally:
            _held.discard(key)
    finally:
        os.close(fd)  # releases the lock


def _remove_if_untouched(created: list[Path], lock: Path) -> None:
    """Remove the folders this run created for ``--save-dir`` when they hold nothing but its lock file."""
    if not created or {p.name for p in created[0].iterdir()} != {LOCK_NAME}:
        return
    with contextlib.suppress(OSError):
        lock.unlink()
        for folder in created:  # deepest first: each is empty once the one below is gone
            folder.rmdir()
