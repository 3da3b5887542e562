"""Reading a file of a model folder or a data-bin without trusting it.

Every such file is checked to be a regular file before it is opened (a FIFO would block the read, a link
to ``/dev/zero`` would never end), its size is bounded before it is read, and a JSON file's nesting is
bounded before it is parsed (Python's parser recurses: 100,000 levels end in a RecursionError). Every
failure is the caller's error class with one line naming the file and saying what is wrong.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np

from nmt.errors import NmtError

MAX_JSON_DEPTH = 64  # nmt's JSON files nest a few levels; far deeper is not one of them
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included
_NOT_BRACKET = re.compile(rb"[^\[\]{}]")
_CHUNK = 1 << 20
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """What a file that is not regular is, for a message ("a FIFO", "a character device", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def regular_file(path: Path, error: type[NmtError], fix: str, missing: str | None = None) -> os.stat_result:
    """The status of ``path`` (links followed), which must be a regular file; else ``error``: ``missing``
    (default "PATH: missing; FIX") when there is nothing there, or what it is instead. Nothing is opened."""
    try:
        st = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            raise error(f"{path}: a symbolic link to a missing file; {fix}") from None
        raise error(missing or f"{path}: missing; {fix}") from None
    except (OSError, RuntimeError) as e:  # a link loop (RuntimeError before Python 3.13), a file under a file
        raise error(f"{path}: cannot be read ({getattr(e, 'strerror', None) or type(e).__name__}); {fix}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{path}: is not a regular file ({file_kind(st.st_mode)}); {fix}")
    return st


def _read_at_most(path: Path, limit: int, error: type[NmtError], fix: str) -> bytes:
    """Up to ``limit + 1`` bytes of the regular file ``path``. Opened non-blocking, so that a FIFO put in its
    place after the check cannot hang the open; checked again on the open file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise error(f"{path}: cannot be read ({e.strerror}); {fix}") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{path}: is not a regular file ({file_kind(mode)}); {fix}")
        try:
            return f.read(limit + 1)  # one buffer, filled by as many reads as it takes
        except OSError as e:
            raise error(f"{path}: cannot be read ({e.strerror}); {fix}") from None


def read_bounded(path: Path, limit: int, what: str, error: type[NmtError], fix: str,
                 missing: str | None = None) -> bytes:
    """The whole content of the regular file ``path``, refused when it holds more than ``limit`` bytes
    (``what`` names the kind of file in that message)."""
    st = regular_file(path, error, fix, missing)
    too_big = f"{path}: {{}} bytes, more than a {what} holds ({limit:,} at most); {fix}"
    if st.st_size > limit:
        raise error(too_big.format(f"{st.st_size:,}"))
    raw = _read_at_most(path, limit, error, fix)
    if len(raw) > limit:  # it grew since the check
        raise error(too_big.format(f"over {limit:,}"))
    return raw


def read_head(path: Path, limit: int, error: type[NmtError], fix: str) -> tuple[bytes, bool]:
    """(the first ``limit`` bytes of the regular file ``path``, whether it holds more)."""
    regular_file(path, error, fix)
    raw = _read_at_most(path, limit, error, fix)
    return raw[:limit], len(raw) > limit


def json_depth(raw: bytes) -> int:
    """How deeply the arrays and objects of a JSON text nest (brackets inside strings do not count)."""
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", raw))
    depth = deepest = 0
    for start in range(0, len(brackets), _CHUNK):  # in chunks: a few MB of memory for any file
        chunk = np.frombuffer(brackets, dtype=np.uint8, count=min(_CHUNK, len(brackets) - start), offset=start)
        levels = depth + np.cumsum(np.where((chunk == ord("[")) | (chunk == ord("{")), 1, -1))
        deepest, depth = max(deepest, int(levels.max())), int(levels[-1])
    return deepest


def parse_json(raw: bytes, path: Path, error: type[NmtError], fix: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value of ``raw`` (the content of ``path``), its nesting bounded before it is parsed. The
    messages name positions, never the file's content."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text (byte {e.start}); {fix}") from None
    if json_depth(raw) > max_depth:
        raise error(f"{path}: JSON nested more than {max_depth} levels deep; {fix}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); {fix}") from None
    except RecursionError:  # not reached after the depth check; kept so that no traceback can escape
        raise error(f"{path}: JSON nested too deeply; {fix}") from None


def read_json(path: Path, limit: int, what: str, error: type[NmtError], fix: str,
              missing: str | None = None) -> Any:
    """The JSON value of the regular file ``path``: size, then nesting bounded before it is parsed."""
    return parse_json(read_bounded(path, limit, what, error, fix, missing), path, error, fix)
