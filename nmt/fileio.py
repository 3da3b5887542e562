"""Crash-safe file writing: a file is written beside its target and renamed into place,
so an interrupted run leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import errno
import gzip
import io
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator

from nmt.errors import NmtError

_DISK_FULL = {errno.ENOSPC, errno.EDQUOT}


class DiskFullError(NmtError):
    """A write failed for lack of space; the target file was left as it was."""

    def __init__(self, path: Path, error: OSError):
        super().__init__(f"{path}: not written, the disk is full ({error.strerror}); the previous {path.name} "
                         "(if any) is unchanged. Free some space or write to another folder, then run again")
        self.path = path


def _disk_full(error: BaseException | None) -> OSError | None:
    """The ENOSPC/EDQUOT error behind ``error``, if any: torch.save reports a failed write of its
    file object as a RuntimeError whose context is the OSError."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, OSError) and error.errno in _DISK_FULL:
            return error
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temp file in ``path``'s folder; on success fsync it and rename it to ``path``.

    A full disk (ENOSPC / EDQUOT) becomes a one-line :class:`DiskFullError`; the temp file is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; the result should have a normal file's mode
    binary = "b" in mode
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        full = _disk_full(e)
        if full is not None:
            raise DiskFullError(path, full) from e
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path, "w") as f:
        f.write(text)


def open_text(path: str | os.PathLike) -> IO[str]:
    """Open a text corpus for reading, gzipped or plain (detected by the gzip magic bytes).

    Decoding is strict so that a bad byte is reported (with file and line) by the reader."""
    path = Path(path)
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="strict", newline="\n")
    return open(path, "r", encoding="utf-8", errors="strict", newline="\n")


def bounded_lines(stream: IO[bytes], limit: int) -> Iterator[bytes]:
    """The lines of a binary stream, each read with at most ``limit + 1`` bytes: a line longer than
    ``limit`` comes back that long (for the caller to refuse) instead of filling the memory."""
    return iter(lambda: stream.readline(limit + 1), b"")
