"""`nmt-prepare`: fetch a public corpus (or copy a local one) into plain-text files that
``nmt-preprocess`` reads: ``DEST/{train,valid,test}.{lang}``, UTF-8, one sentence per line.

Multi30k (task 1) comes from the multi30k/dataset GitHub repository; offline, point it at a local
copy with ``--from DIR`` or ``NMT_MULTI30K_DIR``. A finished folder holds ``.prepared.json`` and
is reused as it is on the next run.
"""

from __future__ import annotations

import io
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from nmt.config.preprocess import PrepareConfig
from nmt.data.corpus_files import gunzip_blocks
from nmt.errors import DataError, UsageError
from nmt.fileio import atomic_write, atomic_write_text

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}.gz"
MULTI30K_ENV = "NMT_MULTI30K_DIR"
MULTI30K_LANGS = ("en", "de", "fr")
# our split name -> the names the corpus uses for it (first one is the upstream file name)
MULTI30K_SPLITS = {"train": ("train",), "valid": ("val", "valid"), "test": ("test_2016_flickr", "test")}
MARKER = ".prepared.json"
DOWNLOAD_TIMEOUT_S = 15


def prepare(cfg: PrepareConfig) -> Path:
    """Prepare ``cfg.dataset`` into ``cfg.dest``; returns the folder."""
    if cfg.dataset != "multi30k":
        raise UsageError(f"unknown dataset {cfg.dataset!r}; choices: multi30k (e.g. nmt-prepare multi30k --dest DIR)")
    if not cfg.dest:
        raise UsageError("--dest DIR is required: the folder to write train/valid/test.{en,de,fr} into")
    return prepare_multi30k(Path(cfg.dest), cfg.from_dir or os.environ.get(MULTI30K_ENV) or None, cfg.overwrite)


def prepare_multi30k(dest: Path, from_dir: str | None, overwrite: bool = False) -> Path:
    """Read all nine files first (a failure writes nothing), then write them; a file of the same name
    that nmt-prepare did not write is never replaced."""
    marker = _read_marker(dest)
    if marker.get("complete") and not overwrite:
        print(f"nmt-prepare: {dest} already holds Multi30k (delete {dest / MARKER} or pass --overwrite to redo)")
        return dest
    source = Path(from_dir) if from_dir else None
    if source is not None and not source.is_dir():
        raise UsageError(f"--from (or {MULTI30K_ENV}) {from_dir}: no such folder; "
                         "give the folder holding train.en.gz, val.en.gz, ...")
    names = [f"{split}.{lang}" for split in MULTI30K_SPLITS for lang in MULTI30K_LANGS]
    foreign = next((n for n in names if (dest / n).exists() and n not in marker.get("files", [])), None)
    if foreign is not None:
        raise UsageError(f"--dest {dest}: already holds {foreign}, which nmt-prepare did not write; "
                         "choose another --dest (a new or empty folder)")
    data: dict[str, bytes] = {}
    counts: dict[str, dict[str, int]] = {}
    for split, upstream in MULTI30K_SPLITS.items():
        for lang in MULTI30K_LANGS:
            text = _read_local(source, upstream, lang) if source else _download(f"{upstream[0]}.{lang}")
            data[f"{split}.{lang}"] = text
            counts.setdefault(split, {})[lang] = _line_count(text)
        if len(set(counts[split].values())) != 1:
            raise DataError(f"Multi30k {split}: languages have different line counts {counts[split]}; "
                            "the copy is incomplete, fetch it again")
    # listed before they are written: a rerun after an interruption may replace them
    atomic_write_text(dest / MARKER, json.dumps({"dataset": "multi30k", "files": names, "complete": False}) + "\n")
    for name, text in data.items():
        with atomic_write(dest / name, "wb") as f:
            f.write(text)
    atomic_write_text(dest / MARKER, json.dumps({"dataset": "multi30k", "files": names, "complete": True,
                                                 "lines": counts}, indent=2) + "\n")
    summary = ", ".join(f"{split} {c['en']}" for split, c in counts.items())
    print(f"nmt-prepare: wrote Multi30k to {dest} ({summary} sentences; languages {', '.join(MULTI30K_LANGS)})")
    return dest


def _line_count(text: bytes) -> int:
    """Lines in ``text``; a last line without a final newline counts."""
    return text.count(b"\n") + (1 if text and not text.endswith(b"\n") else 0)


def _read_marker(dest: Path) -> dict[str, Any]:
    """What ``.prepared.json`` says (``files`` nmt-prepare wrote, ``complete``); empty when absent or damaged.
    A marker written before ``files`` was recorded lists its files in ``lines``."""
    try:
        marker = json.loads((dest / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(marker, dict):
        return {}
    if "files" not in marker and isinstance(marker.get("lines"), dict):
        marker = {**marker, "complete": True,
                  "files": [f"{split}.{lang}" for split, by_lang in marker["lines"].items() for lang in by_lang]}
    files = marker.get("files")
    return marker if isinstance(files, list) and all(isinstance(f, str) for f in files) else {}


def _read_local(source: Path, names: tuple[str, ...], lang: str) -> bytes:
    """The plain text of the first of NAME.LANG.gz / NAME.LANG found in ``source``."""
    for name in names:
        for candidate in (source / f"{name}.{lang}.gz", source / f"{name}.{lang}"):
            if candidate.is_file():
                return _plain_bytes(candidate.read_bytes(), candidate)
    wanted = " or ".join(f"{n}.{lang}[.gz]" for n in names)
    raise DataError(f"--from {source}: no file {wanted}; give the folder of Multi30k task1 raw files")


def _download(name: str) -> bytes:
    url = MULTI30K_URL.format(name=name)
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            raw = response.read()
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise DataError(f"cannot download {url} ({reason}); offline? give a local copy of the Multi30k raw "
                        f"files with --from DIR or {MULTI30K_ENV}=DIR") from None
    return _plain_bytes(raw, Path(url))


def _plain_bytes(raw: bytes, where: Path) -> bytes:
    if raw[:2] != b"\x1f\x8b":
        return raw
    return b"".join(gunzip_blocks(io.BytesIO(raw), where))
