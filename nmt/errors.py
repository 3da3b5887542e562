"""Errors a user can act on. The CLI prints them as one line, without a traceback."""

from __future__ import annotations

import contextlib
import sys
from typing import Any, NoReturn


class NmtError(Exception):
    """A failure explained to the user; ``exit_code`` 1 is a runtime failure."""

    exit_code = 1


class UsageError(NmtError):
    """The command was called wrongly (bad option, missing path, ...): exit code 2."""

    exit_code = 2


class ConfigError(UsageError):
    """A configuration value, YAML key, override or plugin name is wrong."""


class DataError(NmtError):
    """An input file's content is wrong (line counts, encoding, format version, ...)."""


class WorkerError(NmtError):
    """A worker process (nmt-serve --workers, nmt-generate --workers) failed: its own one-line reason and exit code."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def exit_reporting(conn: Any, error: BaseException, what: str) -> NoReturn:
    """End a worker process whose work raised ``error``: send its parent ("error", exit code, one-line reason)
    over ``conn`` (a multiprocessing Connection) and exit with that code. An NmtError keeps its message and code;
    anything else is named as the failure of ``what`` (e.g. "a server process")."""
    code, reason = ((error.exit_code, str(error)) if isinstance(error, NmtError)
                    else (1, f"{what} failed: {type(error).__name__}: {error}"))
    with contextlib.suppress(OSError):
        conn.send(("error", code, reason))
    sys.exit(code)
