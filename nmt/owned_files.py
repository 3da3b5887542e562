"""A command never deletes or replaces a file or folder it did not create.

A command that writes a folder knows the names of the files it writes there (nmt-preprocess: those its
metadata.json describes; nmt-export: the model folder's). :func:`foreign_entries` lists everything else in
the folder, which the command must leave alone or refuse to touch; :func:`move_files_into` puts a finished
build's files in place over the files of the same names and touches nothing else.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Collection


def _regular(path: Path) -> bool:
    """A regular file itself, not a link to one (a command replaces its own files, never a user's link)."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def foreign_entries(folder: Path, own: Collection[str]) -> list[str]:
    """The entries of ``folder`` that are not among ``own`` (relative paths of the regular files the command
    writes), as sorted relative paths: any other file; a link or anything not a regular file, even under
    one of those names; a sub-folder that holds none of them. A sub-folder that may hold some is looked into."""
    own = set(own)
    found: list[str] = []

    def visit(current: Path, prefix: str) -> None:
        for entry in sorted(current.iterdir()):
            relative = prefix + entry.name
            if relative in own and _regular(entry):
                continue
            if entry.is_dir() and not entry.is_symlink() and any(name.startswith(relative + "/") for name in own):
                visit(entry, relative + "/")
            else:
                found.append(relative)

    visit(folder, "")
    return found


def clashes(foreign: list[str], writes: Collection[str]) -> list[str]:
    """The entries of ``foreign`` that writing ``writes`` (relative paths) would replace or need to replace:
    an entry of the same name, or one where a folder of a written path must be."""
    return [f for f in foreign if any(name == f or name.startswith(f + "/") for name in writes)]


def files_under(folder: Path) -> list[str]:
    """Every regular file under ``folder``, as sorted relative paths."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if _regular(p))


def move_files_into(src: Path, dest: Path, last: str) -> list[str]:
    """Move every file of the finished build ``src`` into the folder ``dest``, each renamed over the file of the
    same name (so a reader sees the old file or the new one, never half of one); the files named ``last``
    (that say a folder is complete: a manifest, a metadata.json) go after all the others. Sub-folders are
    made as needed; nothing else in ``dest`` is touched. ``src``, then empty, is removed. Returns the files."""
    names = sorted(files_under(src), key=lambda name: Path(name).name == last)
    for name in names:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        os.replace(src / name, dest / name)
    shutil.rmtree(src, ignore_errors=True)
    return names
