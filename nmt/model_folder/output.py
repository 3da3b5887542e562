"""Where nmt-export writes a model folder: checking ``--output``, building the folder beside it, and putting
nmt's files in place.

nmt-export knows the names of the files it writes (``nmt.model_folder.layout`` and the dictionaries and
codes of metadata.json). ``--force`` replaces those, and only in a model folder; every other entry (the
user's ``NOTES.txt``, a ``results/`` folder) is kept, and a link or a folder under one of nmt's names is
refused. The new files are written into a private sibling folder first and each is renamed over the old
one, model.json last: a stop part-way leaves the old manifest, which the new weights no longer match, so
the folder is refused on loading (and a rerun with ``--force`` completes it), never half-read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path
from typing import Collection, Iterator

from nmt.bounded_read import file_kind
from nmt.data.data_dir import make_parents, remove_empty, resolve_destdir
from nmt.data.metadata import METADATA_FILE, data_bin_files, read_metadata
from nmt.data.work_dirs import clean_leftovers, new_work_dir, release
from nmt.errors import DataError, UsageError
from nmt.model_folder.engine_files import owned_files
from nmt.model_folder.layout import CARD, MANIFEST, WEIGHTS, is_model_folder, read_manifest
from nmt.owned_files import clashes, files_under, foreign_entries, move_files_into
from nmt.signals import stop_signals_deferred

OWN_NAMES = frozenset({MANIFEST, WEIGHTS, CARD, METADATA_FILE})  # with the dictionaries and codes metadata.json names


def exported_files(folder: Path) -> set[str]:
    """The files nmt-export wrote in the model folder ``folder``: the fixed names, and the dictionaries and
    codes its metadata.json names (when it can be read)."""
    own = set(OWN_NAMES)
    with contextlib.suppress(DataError):
        own |= data_bin_files(read_metadata(folder))
    with contextlib.suppress(DataError):  # the engine sub-folders' files (nmt-export --with)
        own |= owned_files(read_manifest(folder), folder)
    return own


def _what(path: Path) -> str:
    """What an entry in the way is: "a symbolic link", "a folder", "a file", ..."""
    if path.is_symlink():
        return "a symbolic link"
    mode = path.lstat().st_mode
    return "a file" if stat.S_ISREG(mode) else file_kind(mode)


def check_output(output: str | Path, force: bool, writes: Collection[str]) -> tuple[Path, list[str]]:
    """(the resolved ``--output``, the entries in it nmt-export leaves alone) when it may write ``writes``
    (relative paths) there: a new or empty folder; with ``force``, a model folder, whose files of nmt's names
    are replaced. Anything else is refused in one line."""
    path = resolve_destdir(output, "--output")
    if not path.is_dir() or not any(path.iterdir()):
        return path, []
    if not force:
        raise UsageError(f"--output {output}: exists and is not empty; give a new or empty folder, or pass --force "
                         "to replace the files an earlier nmt-export wrote there (your other files are kept)")
    if not is_model_folder(path):
        raise UsageError(f"--output {output}: is not a model folder (no {MANIFEST}); --force replaces only the files "
                         "nmt-export wrote, and there are none: give a new or empty folder")
    kept = foreign_entries(path, exported_files(path) | set(writes))
    clash = clashes(kept, writes)
    if clash:
        raise UsageError(f"--output {output}: {clash[0]} is {_what(path / clash[0])}, which nmt-export did not write "
                         f"and does not replace; move it away or choose another --output")
    return path, kept


def _ordinary_modes(folder: Path) -> None:
    """mkdtemp and safetensors make owner-only modes: give the folder and its files the usual ones."""
    umask = os.umask(0)
    os.umask(umask)
    for item in [folder, *folder.rglob("*")]:
        item.chmod((0o777 if item.is_dir() else 0o666) & ~umask)


@contextlib.contextmanager
def folder_in_place(output: str | Path, force: bool, writes: Collection[str]) -> Iterator[Path]:
    """A private folder beside ``output`` to fill with ``writes``; when the block succeeds its files are put in
    place (:func:`check_output` passed again first): renamed to ``output`` when that is new, else moved over
    the files of the same names, model.json last, and the earlier export's files it no longer writes removed.
    On failure the private folder and the parent folders made for it are removed: all is as it was."""
    path, _ = check_output(output, force, writes)
    created = make_parents(path, "--output")
    tmp = None
    try:
        clean_leftovers(path)
        tmp = new_work_dir(path, "tmp")
        yield tmp
        release(tmp)
        _ordinary_modes(tmp)
        with stop_signals_deferred():
            path, _ = check_output(output, force, files_under(tmp))  # something may have appeared meanwhile
            if not path.exists():
                os.replace(tmp, path)
                return
            stale = exported_files(path) - set(files_under(tmp))
            move_files_into(tmp, path, MANIFEST)
            for name in stale:
                if (path / name).is_file() and not (path / name).is_symlink():
                    (path / name).unlink()
                    remove_empty(list((path / name).parents)[: name.count("/")])  # an engine's emptied folders
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        remove_empty(created)
        raise


def files_kept(folder: Path) -> list[str]:
    """The entries of the model folder ``folder`` that nmt-export did not write (the user's own)."""
    return foreign_entries(folder, exported_files(folder))
