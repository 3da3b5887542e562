"""Shared by the reliability tests: run a real command, check its one-line error, and prove with
checksums that it left every input (and the user's other files) exactly as they were."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable

from test_generate_setup import call_cli
from test_input_validation import LOG_RECORD  # nmt-train's progress log may precede the error line


def checksums(*folders: Path) -> dict[str, str]:
    """sha256 of every file under ``folders`` (links and folders by name), keyed by path."""
    out: dict[str, str] = {}
    for folder in folders:
        for path in sorted([folder, *folder.rglob("*")]):
            if path.is_symlink():
                out[str(path)] = "link -> " + str(path.readlink())
            elif path.is_file():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            elif path.is_dir():
                out[str(path)] = "folder"
    return out


def one_error_line(err: str, prog: str) -> str:
    """The single ``prog: error: ...`` line of ``err``; fails on a traceback or any other line."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if not LOG_RECORD.match(ln)]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    return lines[0]


def fails_cleanly(main: Callable[[list[str]], None], prog: str, argv: list[Any], code: int, needles: tuple[str, ...],
                  watched: list[Path], capsys) -> str:
    """Run ``prog argv`` in-process; assert exit ``code``, one error line holding ``needles``, no
    traceback, and every file under ``watched`` unchanged. Returns the error line."""
    before = checksums(*watched)
    capsys.readouterr()
    got = call_cli(main, argv)
    err = capsys.readouterr().err
    line = one_error_line(err, prog)
    assert got == code, err
    for needle in needles:
        assert needle in line, line
    assert checksums(*watched) == before
    return line
