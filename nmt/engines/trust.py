"""The record of the compiled packages this user built on this machine, kept outside every model folder.

A compiled package (``nmt-export --with compiled``) is native code: loading it runs it. Every other file of a model
folder is data that loading checks and never executes, so a folder from elsewhere is safe to open; a compiled
package is not. It is loaded only when its sha256 is in this record, which only ``export_compiled`` adds to (the
package was built here, by this user), or when the user says ``--trust-compiled``.

The record is ``$XDG_CACHE_HOME/nmt/trusted-compiled.json`` (``~/.cache/nmt/...`` without it): the sha256 of each
package -> what it was built for (torch, CPU) and when. It is the user's own file, mode 0600: one that another user
owns or may write is refused, since whoever writes it decides what code runs."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

from nmt.bounded_read import read_json
from nmt.errors import NmtError
from nmt.fileio import atomic_write

RECORD_NAME = "trusted-compiled.json"
FORMAT_VERSION = 1
MAX_RECORD_BYTES = 64 << 20  # about 200,000 packages; a record far larger is not one nmt wrote
SHA256 = re.compile(r"[0-9a-f]{64}")


def record_path() -> Path:
    """Where the record is: under $XDG_CACHE_HOME when set to an absolute path (the XDG rule), else ~/.cache."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(cache) if os.path.isabs(cache) else Path.home() / ".cache"
    return base / "nmt" / RECORD_NAME


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fix(path: Path) -> str:
    return (f"delete {path} (the compiled packages it listed then need --trust-compiled, or nmt-export --with "
            "compiled again)")


def _check_owner(path: Path, st: os.stat_result) -> None:
    """Refuse a record another user owns or may write: it decides which native code this user runs."""
    getuid = getattr(os, "getuid", None)
    if getuid is not None and st.st_uid != getuid():
        raise NmtError(f"{path}: owned by another user (uid {st.st_uid}), so it cannot say which compiled packages "
                       f"you trust; {_fix(path)}")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise NmtError(f"{path}: writable by other users (mode {stat.S_IMODE(st.st_mode):o}), so it cannot say "
                       f"which compiled packages you trust; chmod 600 {path}")


def read_record(path: Optional[Path] = None) -> dict[str, dict[str, Any]]:
    """sha256 -> facts of every package in the record (empty when there is none yet); a damaged record, or one
    others may write, is one line naming it and the fix."""
    path = record_path() if path is None else path
    try:
        st = path.stat()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise NmtError(f"{path}: cannot be read ({e.strerror}); {_fix(path)}") from None
    _check_owner(path, st)
    data = read_json(path, MAX_RECORD_BYTES, "trust record", NmtError, _fix(path))
    packages = data.get("packages") if isinstance(data, dict) else None
    if (not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION or not isinstance(packages, dict)
            or not all(isinstance(k, str) and SHA256.fullmatch(k) and isinstance(v, dict)
                       for k, v in packages.items())):
        raise NmtError(f"{path}: not a record of trusted compiled packages (format {FORMAT_VERSION}); {_fix(path)}")
    return packages


def trusted(digest: str, path: Optional[Path] = None) -> Optional[dict[str, Any]]:
    """What the record says of the package whose sha256 is ``digest`` (built for which torch and CPU), or None when
    this user did not build it here."""
    return read_record(path).get(digest)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock beside the record while it is read and rewritten: two exports finishing at once
    both get their packages in."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks (Windows): a lost update only means --trust-compiled once more
        yield
        return
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def add_trusted(digests: Mapping[str, str], built_for: Mapping[str, str], path: Optional[Path] = None) -> Path:
    """Add packages to the record: ``digests`` maps each package's sha256 to its file name, ``built_for`` is
    :func:`nmt.engines.build_target.this_machine`. Returns the record's path. The record is rewritten whole
    (written beside it, then renamed) with mode 0600."""
    path = record_path() if path is None else path
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise NmtError(f"{path.parent}: cannot hold the record of trusted compiled packages ({e.strerror}); "
                       "set XDG_CACHE_HOME to a folder you may write") from None
    with _locked(path):
        packages = read_record(path)
        built = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for digest, file in digests.items():
            packages[digest] = {"file": file, "built": built, **built_for}
        with atomic_write(path) as f:
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), 0o600)  # before any byte is in it
            json.dump({"format_version": FORMAT_VERSION, "packages": packages}, f, indent=1, sort_keys=True)
            f.write("\n")
    return path
