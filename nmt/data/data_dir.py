"""The output folder of nmt-preprocess: checking the --destdir, recognising a finished job, and
putting the new data-bin in place so that the folder never holds half of a run.

Only a folder that is itself a data-bin (its metadata.json written by nmt-preprocess, and nothing
but the files that metadata describes) or a folder of such data-bins ``shard0``, ``shard1``, ...
(``--num-shards``) is ever replaced, and only with ``--overwrite``; a data-bin holding one of the
job's inputs is never replaced. An empty folder is filled, not replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterable

from nmt.data.data_shards import SHARD_PREFIX, shard_folder_name
from nmt.data.metadata import METADATA_FILE, data_bin_files, read_metadata
from nmt.data.work_dirs import new_work_dir, release
from nmt.errors import DataError, UsageError
from nmt.owned_files import files_under, foreign_entries, move_files_into
from nmt.signals import stop_signals_deferred

_OTHER = "choose another --destdir (a new or empty folder)"
_SHARD = re.compile(re.escape(SHARD_PREFIX) + r"(0|[1-9][0-9]*)")


def job_fingerprint(options: dict[str, Any], inputs: list[Path], user_dir: str | None) -> str:
    """What determines the output: the options that change it and the input files (path, size,
    mtime), so a rerun of the same job can be recognised without reading the data."""
    files = {}
    for path in inputs:
        st = path.stat()
        files[str(path.resolve())] = [st.st_size, st.st_mtime_ns]
    blob = json.dumps({"options": options, "files": files, "user_dir": user_dir}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def resolve_destdir(destdir: str | Path, option: str = "--destdir") -> Path:
    """The absolute, link-free path of ``option`` (``--destdir``, nmt-export's ``--output``: ``.``, ``..``
    and links resolved), checked to be a place a folder can be: not the root, not a file, not under a file."""
    given = str(destdir)
    other = f"choose another {option} (a new or empty folder)"
    if not given.strip():
        raise UsageError(f"{option} is empty; give the folder to write to, e.g. {option} "
                         f"{'data-bin/en_de' if option == '--destdir' else 'models/en_de'}")
    try:
        path = Path(given).resolve()
    except (RuntimeError, OSError):  # a symbolic link loop (RuntimeError before Python 3.13)
        raise UsageError(f"{option} {given}: a symbolic link loop (or a path that cannot be resolved); "
                         f"fix the link or {other}") from None
    if path.parent == path:
        raise UsageError(f"{option} {given}: is the root folder; {other}")
    try:
        existing = next(p for p in path.parents if p.exists())
        if not existing.is_dir():
            shown = existing if Path(given).is_absolute() else os.path.relpath(existing)  # as the user wrote it
            raise UsageError(f"{option} {given}: {shown} is a file, not a folder; {other}")
        if path.exists() and not path.is_dir():
            raise UsageError(f"{option} {given}: exists and is not a folder; {other}")
    except OSError as e:
        raise UsageError(f"{option} {given}: cannot be checked ({e.strerror}); {other}") from None
    return path


def check_writable(destdir: Path) -> None:
    """Refuse at once (not after the whole job) a --destdir we may not write: the temp folder goes
    beside it (in its nearest existing parent), and a folder that exists is filled or replaced."""
    existing = next(p for p in destdir.parents if p.exists())
    for folder in (existing, destdir) if destdir.exists() else (existing,):
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(f"--destdir {destdir}: no permission to write in {folder}; {_OTHER}")


def _metadata_or_none(folder: Path) -> dict[str, Any] | None:
    try:
        return read_metadata(folder)
    except DataError:
        return None


def first_data_bin(destdir: Path) -> Path:
    """The data-bin of a --destdir: the folder itself, or its shard0 when nmt-preprocess wrote shards."""
    first = destdir / shard_folder_name(0)
    return first if not (destdir / METADATA_FILE).is_file() and first.is_dir() else destdir


def _own_files(destdir: Path) -> tuple[dict[str, Any], set[str]] | None:
    """(the metadata of the first data-bin, every file nmt-preprocess may have written there) when
    ``destdir`` is a data-bin or a folder of shards; None otherwise. Every shard must carry the
    first one's job fingerprint for the job to count as the same."""
    meta = _metadata_or_none(destdir)
    if meta is not None:
        return meta, data_bin_files(meta)
    shards = sorted((p for p in destdir.iterdir() if p.is_dir() and _SHARD.fullmatch(p.name)),
                    key=lambda p: int(p.name[len(SHARD_PREFIX):]))
    metas = [_metadata_or_none(p) for p in shards]
    if not shards or metas[0] is None or shards[0].name != shard_folder_name(0):
        return None
    first = dict(metas[0])
    complete = [p.name for p in shards] == [shard_folder_name(k) for k in range(len(shards))] and \
        all(m is not None and m.get("job_fingerprint") == first.get("job_fingerprint") for m in metas) and \
        (first.get("shard") or {}).get("of") == len(shards)
    if not complete:
        first["job_fingerprint"] = None  # not the same job: a shard is missing or from another run
    allowed = {f"{p.name}/{name}" for p, m in zip(shards, metas) if m is not None for name in data_bin_files(m)}
    return first, allowed


def _within(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder)
    except (OSError, RuntimeError):
        return False


def destdir_state(destdir: str | Path, fingerprint: str, overwrite: bool, inputs: Iterable[Path] = ()) -> str:
    """"new" (no folder), "empty", "same" (already done with these inputs) or "replace" (a data-bin
    of nmt-preprocess, with --overwrite); any other folder is refused."""
    shown = destdir
    destdir = resolve_destdir(destdir)
    if not destdir.exists():
        return "new"
    entries = sorted(p.name for p in destdir.iterdir())
    if not entries:
        return "empty"
    own = _own_files(destdir)
    if own is None:
        raise UsageError(f"--destdir {shown}: is not empty and is not a data-bin written by nmt-preprocess "
                         f"(it holds {entries[0]}{' and more' if len(entries) > 1 else ''}, and no valid "
                         f"{METADATA_FILE}); nmt-preprocess never replaces such a folder: {_OTHER}")
    meta, allowed = own
    if meta.get("job_fingerprint") == fingerprint and not overwrite:
        return "same"
    foreign = foreign_entries(destdir, allowed)
    if foreign:
        raise UsageError(f"--destdir {shown}: a data-bin that also holds {foreign[0]}, which nmt-preprocess did "
                         f"not write; it replaces only a folder of its own files: move {foreign[0]} away or {_OTHER}")
    inside = next((p for p in inputs if _within(p, destdir)), None)
    if inside is not None:
        raise UsageError(f"--destdir {shown}: holds the input {inside}, which replacing the folder would delete; "
                         f"{_OTHER}")
    if not overwrite:
        raise UsageError(f"--destdir {shown}: already holds different data (a data-bin of other options or "
                         "inputs); pass --overwrite to replace that data-bin or choose another --destdir")
    return "replace"


def make_parents(destdir: Path, option: str = "--destdir") -> list[Path]:
    """Create the missing folders above ``destdir`` (given as ``option``); returns those created (to remove
    on failure)."""
    missing = [p for p in destdir.parents if not p.exists()]
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            pass
        except OSError as e:
            remove_empty(missing)
            raise UsageError(f"{option} {destdir}: cannot create {folder} ({e.strerror}); choose another {option} "
                             "(a new or empty folder)") from None
    return missing


def remove_empty(folders: list[Path]) -> None:
    """Remove the folders :func:`make_parents` created, deepest first, if nothing else was put in them."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            pass


def new_temp_dir(destdir: str | Path) -> Path:
    """A private folder beside ``destdir`` (same file system, so the final rename is atomic); its
    parent folders must exist (:func:`make_parents`) unless called for a new import."""
    destdir = resolve_destdir(destdir)
    destdir.parent.mkdir(parents=True, exist_ok=True)
    try:
        return new_work_dir(destdir, "tmp")
    except OSError as e:
        raise UsageError(f"--destdir {destdir}: cannot create a folder in {destdir.parent} ({e.strerror}); "
                         f"{_OTHER}") from None


def move_into_place(tmp: Path, destdir: str | Path, state: str) -> list[str]:
    """Put the finished temp folder at ``destdir``: renamed there, moved into an empty folder (which
    stays the user's folder), or swapped with the data-bin it replaces. Returns the replaced
    data-bin's files, now removed."""
    destdir = resolve_destdir(destdir)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the result is an ordinary folder
    release(tmp)
    old = None
    with stop_signals_deferred():
        if state == "empty":
            move_files_into(tmp, destdir, METADATA_FILE)
        elif state == "replace":
            old = new_work_dir(destdir, "old")
            os.replace(destdir, old / destdir.name)
            try:
                os.replace(tmp, destdir)
            except BaseException:
                os.replace(old / destdir.name, destdir)  # put the old data-bin back
                shutil.rmtree(old, ignore_errors=True)
                raise
        else:
            os.replace(tmp, destdir)
    if old is None:
        return []
    removed = files_under(old / destdir.name)
    shutil.rmtree(old, ignore_errors=True)
    return removed


def metadata_languages(data: str | Path, source_lang: str | None,
                       target_lang: str | None) -> tuple[str, str] | None:
    """The given languages, the missing ones read from the data-bin's metadata.json; None when
    one is missing and there is no metadata.json to read it from."""
    if source_lang and target_lang:
        return source_lang, target_lang
    if not (Path(data) / METADATA_FILE).exists():  # one that is there but not a regular file is named by read_metadata
        return None
    info = read_metadata(data)
    return source_lang or info["source_lang"], target_lang or info["target_lang"]


def resolve_langs(data: str | Path | None, source_lang: str | None, target_lang: str | None) -> tuple[str, str]:
    """--source-lang / --target-lang, or the pair recorded in the data-bin's metadata.json."""
    if not data or not Path(data).is_dir():
        raise UsageError(f"data-bin folder {data or '(none)'}: no such folder; give the folder nmt-preprocess "
                         "wrote, e.g. nmt-train data-bin/multi30k_en_de")
    langs = metadata_languages(data, source_lang, target_lang)
    if langs is not None:
        return langs
    raise UsageError(f"{data}: no metadata.json to read the languages from; pass --source-lang and --target-lang")


def kept_raw_text(data: str | Path, split: str, lang: str) -> Path | None:
    """The untokenized text of ``split`` that nmt-preprocess kept in ``data``/raw/ (the BLEU reference), or None."""
    kept = Path(data) / "raw" / f"{split}.{lang}"
    return kept if kept.is_file() else None
