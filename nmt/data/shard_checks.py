"""Checks that the shards of a sharded DATA (``a:b:c``, see data_shards.py) belong together: one language
pair, one pair of dictionaries. They run before training or translating starts, so a mismatched shard is
found at once rather than when an epoch first reaches it."""

from __future__ import annotations

from pathlib import Path

from nmt.data.data_dir import metadata_languages
from nmt.data.dictionary import Dictionary
from nmt.data.indexed_dataset import IndexedDataset, dataset_exists
from nmt.errors import UsageError


def _fix(first: Path, src: str, tgt: str) -> str:
    return (f"binarize every shard with --source-lang {src} --target-lang {tgt} and the first shard's dictionaries "
            f"(nmt-preprocess --srcdict {first / f'dict.{src}.txt'} --tgtdict {first / f'dict.{tgt}.txt'}), or "
            "write them together with nmt-preprocess --num-shards N")


def check_same_dictionaries(shards: list[str], src: str, tgt: str) -> None:
    """Every shard must hold the first shard's dictionaries (token ids mean the same in every shard);
    a mismatch is one line naming the shard and how to binarize it again."""
    if len(shards) < 2:
        return
    first = Path(shards[0])
    expected = {lang: Dictionary.load(first / f"dict.{lang}.txt").fingerprint() for lang in (src, tgt)}
    for k, shard in enumerate(shards[1:], start=1):
        for lang in (src, tgt):
            path = Path(shard) / f"dict.{lang}.txt"
            if not path.is_file():
                raise UsageError(f"shard {k} ({shard}): no dict.{lang}.txt, so it is no data-bin of {src}-{tgt} "
                                 f"like {first}; {_fix(first, src, tgt)}")
            if Dictionary.load(path).fingerprint() != expected[lang]:
                raise UsageError(f"shard {k} ({shard}): dict.{lang}.txt differs from {first}'s; all shards must "
                                 f"share the dictionaries: {_fix(first, src, tgt)}")


def check_training_shards(shards: list[str], src: str, tgt: str, split: str) -> None:
    """Before training starts, not when an epoch first reaches a shard (with a short --max-update, never):
    every shard is a data-bin of the first shard's language pair holding ``split`` of ``src``-``tgt``, with
    the first shard's dictionaries. Only the headers of a shard's split are read here; its content is
    checked when its epoch opens it."""
    if len(shards) < 2:
        return
    first = Path(shards[0])
    first_pair = metadata_languages(first, None, None)  # None: a data-bin without metadata.json
    for k, shard in enumerate(shards[1:], start=1):
        pair = metadata_languages(shard, None, None)
        if first_pair and pair and pair != first_pair:
            raise UsageError(f"shard {k} ({shard}): a data-bin of {'-'.join(pair)} (its metadata.json), but the "
                             f"first shard {first} is one of {'-'.join(first_pair)}; {_fix(first, src, tgt)}")
        for lang in (src, tgt):
            prefix = Path(shard) / f"{split}.{src}-{tgt}.{lang}"
            if not dataset_exists(prefix):
                raise UsageError(f"shard {k} ({shard}): no {split!r} split of {src}-{tgt} ({prefix}.bin/.idx "
                                 f"missing) like {first}'s; {_fix(first, src, tgt)}")
    check_same_dictionaries(shards, src, tgt)
    for shard in shards[1:]:
        for lang in (src, tgt):
            IndexedDataset(Path(shard) / f"{split}.{src}-{tgt}.{lang}")  # a truncated or newer .idx: one line now
