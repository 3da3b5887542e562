"""`nmt-prepare`: fetch a public corpus (or copy a local one) into plain-text files that
``nmt-preprocess`` reads: ``DEST/{train,valid,test}.{lang}``, UTF-8, one sentence per line.

Multi30k (task 1) comes from the multi30k/dataset GitHub repository; offline, point it at a local
copy with ``--from DIR`` or ``NMT_MULTI30K_DIR``. A finished folder holds ``.prepared.json`` and
is reused as it is on the next run.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import urllib.error
import urllib.request
from pathlib import Path

from nmt.config.preprocess import PrepareConfig
from nmt.data.corpus_files import count_lines
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
    if (dest / MARKER).is_file() and not overwrite:
        print(f"nmt-prepare: {dest} already holds Multi30k (delete {dest / MARKER} or pass --overwrite to redo)")
        return dest
    source = Path(from_dir) if from_dir else None
    if source is not None and not source.is_dir():
        raise UsageError(f"--from (or {MULTI30K_ENV}) {from_dir}: no such folder; "
                         "give the folder holding train.en.gz, val.en.gz, ...")
    counts: dict[str, dict[str, int]] = {}
    for split, names in MULTI30K_SPLITS.items():
        for lang in MULTI30K_LANGS:
            out = dest / f"{split}.{lang}"
            data = _read_local(source, names, lang) if source else _download(f"{names[0]}.{lang}")
            with atomic_write(out, "wb") as f:
                f.write(data)
            counts.setdefault(split, {})[lang] = count_lines(out)
        if len(set(counts[split].values())) != 1:
            raise DataError(f"Multi30k {split}: languages have different line counts {counts[split]}; "
                            "the copy is incomplete, fetch it again")
    atomic_write_text(dest / MARKER, json.dumps({"dataset": "multi30k", "lines": counts}, indent=2) + "\n")
    summary = ", ".join(f"{split} {c['en']}" for split, c in counts.items())
    print(f"nmt-prepare: wrote Multi30k to {dest} ({summary} sentences; languages {', '.join(MULTI30K_LANGS)})")
    return dest


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
    try:
        return gzip.GzipFile(fileobj=io.BytesIO(raw)).read()
    except (OSError, EOFError) as e:
        raise DataError(f"{where}: not a readable gzip file ({e}); fetch it again") from None
