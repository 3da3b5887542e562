"""A data-bin's ``metadata.json``: read it without trusting it, and list the files nmt-preprocess
writes for it.

Every reader of a data-bin (nmt-train, nmt-generate, nmt-validate, nmt-interactive, a rerun of
nmt-preprocess) goes through :func:`read_metadata`, so a damaged file ends in one line naming the
file and the key instead of a ``JSONDecodeError`` or ``KeyError`` deep inside a command. Nothing
from the file's content is put in the message (a key name and its expected type only).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from nmt.bounded_read import parse_json, read_bounded
from nmt.errors import DataError

METADATA_FILE = "metadata.json"
MAX_METADATA_BYTES = 16 << 20  # nmt-preprocess writes a few KB; anything this big is not ours
_FIX = "the file is damaged; re-run nmt-preprocess to write it again"

# key path -> the type its value must have
_SCHEMA: tuple[tuple[str, type], ...] = (
    ("source_lang", str), ("target_lang", str), ("langs", list), ("dictionaries", dict), ("pipeline", dict),
    ("pipeline.tokenizer", dict), ("pipeline.tokenizer.name", str), ("pipeline.bpe", dict),
    ("pipeline.bpe.name", str), ("splits", dict),
)
_TYPE_NAMES: dict[type, str] = {str: "a string", list: "a list", dict: "a JSON object"}
# a language name becomes part of file names (dict.LANG.txt): no path separators, no leading dot
_LANG = re.compile(r"[^/\\\x00.][^/\\\x00]{0,63}")


def _value(meta: dict[str, Any], key: str) -> Any:
    node: Any = meta
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def parse_metadata(raw: bytes, path: Path) -> dict[str, Any]:
    """The checked content of a metadata.json given as bytes; ``DataError`` naming ``path`` and the
    key when it is not what nmt-preprocess writes."""
    meta = parse_json(raw, path, DataError, _FIX)
    if not isinstance(meta, dict):
        raise DataError(f"{path}: holds no JSON object; {_FIX}")
    for key, kind in _SCHEMA:
        try:
            value = _value(meta, key)
        except KeyError:
            raise DataError(f"{path}: \"{key}\" is missing; {_FIX}") from None
        if not isinstance(value, kind):
            raise DataError(f"{path}: \"{key}\" must be {_TYPE_NAMES[kind]}; {_FIX}")
    if not isinstance(meta["pipeline"].get("user_dir"), (str, type(None))):
        raise DataError(f"{path}: \"pipeline.user_dir\" must be a string or null; {_FIX}")
    codes = meta["pipeline"]["bpe"].get("codes", {})
    if not isinstance(codes, dict) or not all(isinstance(v, str) for v in codes.values()):
        raise DataError(f"{path}: \"pipeline.bpe.codes\" must map languages to file names; {_FIX}")
    langs = [*meta["langs"], meta["source_lang"], meta["target_lang"]]
    if not all(isinstance(lang, str) and _LANG.fullmatch(lang) for lang in langs):
        raise DataError(f"{path}: \"langs\", \"source_lang\" and \"target_lang\" must be language names; {_FIX}")
    return meta


def read_metadata(data_dir: str | Path) -> dict[str, Any]:
    """The checked metadata.json of ``data_dir``; a missing, oversized or damaged file is a ``DataError``."""
    path = Path(data_dir) / METADATA_FILE
    missing = f"{path}: missing; {data_dir} is not a folder written by nmt-preprocess"
    return parse_metadata(read_bounded(path, MAX_METADATA_BYTES, METADATA_FILE, DataError, _FIX, missing), path)


def data_bin_files(meta: dict[str, Any]) -> set[str]:
    """The relative paths nmt-preprocess (or nmt-import-fairseq) may write in a data-bin described by
    ``meta``: what ``--overwrite`` is allowed to remove, and nothing else."""
    src, tgt = meta["source_lang"], meta["target_lang"]
    langs = {src, tgt, *meta["langs"]}
    files = {METADATA_FILE, *(f"dict.{lang}.txt" for lang in langs)}
    files |= {name for name in meta["pipeline"]["bpe"].get("codes", {}).values()}
    for split in meta["splits"]:
        for lang in langs:
            files |= {f"{split}.{src}-{tgt}.{lang}.bin", f"{split}.{src}-{tgt}.{lang}.idx",
                      f"raw/{split}.{lang}", f"text/{split}.{lang}"}
    return files
