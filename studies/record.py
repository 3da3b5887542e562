"""A study's record: results.json, the settings its runs were made with and one entry per finished run, written
as each run finishes so that an interrupted study keeps what it measured."""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

from nmt.errors import UsageError
from nmt.fileio import atomic_write_text


@contextmanager
def locked_folder(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder`` (flock on its descriptor) while the block runs; it waits for another holder
    (nmt.checkpoint.save_dir's lock refuses instead, so it does not serve here)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


class Table:
    """The finished runs of a study (RECORD_DIR/results.json: the settings they were made with, and a record per
    run, each with its "variant" and "seed")."""

    def __init__(self, path: Path, settings: dict[str, Any]):
        self.path = path
        self.settings = settings
        saved = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"settings": settings, "runs": {}}
        if saved.get("settings") != settings:
            raise UsageError(f"{path}: its runs were made with other settings ({saved.get('settings')}); give another "
                             "--out-dir, or the same settings to add to them")
        self.runs: dict[str, dict[str, Any]] = saved["runs"]

    def get(self, key: str) -> Optional[dict[str, Any]]:
        return self.runs.get(key)

    def add(self, key: str, record: dict[str, Any]) -> None:
        """Keep ``record`` under ``key`` and write the file at once (an interrupted study keeps it). The runs another
        study added to the file since it was read are kept too, and the file's version of a run wins over the copy
        read at the start (a note added by hand stays): two studies of other --variants may share a record (the file
        is read again and written under a lock on its folder)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with locked_folder(self.path.parent):
            if self.path.is_file():
                self.runs = {**self.runs, **json.loads(self.path.read_text(encoding="utf-8"))["runs"]}
            self.runs[key] = record
            atomic_write_text(self.path, json.dumps({"settings": self.settings, "runs": self.runs}, indent=2) + "\n")

    def seeds_of(self, name: str) -> list[dict[str, Any]]:
        """The runs of variant ``name``, by seed."""
        return sorted((r for r in self.runs.values() if r["variant"] == name), key=lambda r: r["seed"])
