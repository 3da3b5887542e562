"""Opening a data-bin to translate or score with: its languages and dictionaries (nmt-generate,
nmt-interactive, nmt-validate, nmt-export and the Python API read a data-bin this one way)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nmt.data.dictionary import Dictionary
from nmt.errors import UsageError


@dataclass
class DataDir:
    """A data-bin folder's languages and dictionaries."""

    path: Path
    src: str
    tgt: str
    src_dict: Dictionary
    tgt_dict: Dictionary


def open_data_dir(data: str | None, source_lang: str | None, target_lang: str | None) -> DataDir:
    """The languages (from the flags or metadata.json) and dictionaries of ``data``; of its first shard
    when it is sharded (``a:b``, whose shards must share the dictionaries), where its test and
    validation splits are too (fairseq's convention)."""
    from nmt.data.data_dir import resolve_langs
    from nmt.data.data_shards import data_shards
    from nmt.data.shard_checks import check_same_dictionaries

    shards = data_shards(data) if data else [data]
    src, tgt = resolve_langs(shards[0], source_lang, target_lang)
    assert shards[0] is not None  # resolve_langs refuses a missing folder
    folder = Path(shards[0])
    for lang in (src, tgt):
        if not (folder / f"dict.{lang}.txt").exists():  # one that is not a regular file is named by Dictionary.load
            raise UsageError(f"{folder}: no dict.{lang}.txt; check --source-lang/--target-lang or re-run "
                             "nmt-preprocess")
    check_same_dictionaries([str(s) for s in shards], src, tgt)
    src_dict = Dictionary.load(folder / f"dict.{src}.txt")
    tgt_dict = Dictionary.load(folder / f"dict.{tgt}.txt")
    return DataDir(folder, src, tgt, src_dict, tgt_dict)
