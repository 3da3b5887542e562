"""Sharded data-bins, fairseq's convention: ``DATA = data-bin/shard0:data-bin/shard1:...``.

Each shard is a complete data-bin with the same dictionaries. Training epoch k reads the training
split of shard ``(k - 1) mod n`` (epoch 1 the first shard); validation, test and every command that
needs only the dictionaries read the first shard. A shard is opened only when its epoch starts, so
a corpus too big for one index in memory can be cut into several.
"""

from __future__ import annotations

from pathlib import Path

from nmt.errors import UsageError

SHARD_PREFIX = "shard"  # nmt-preprocess --num-shards N writes DESTDIR/shard0 ... DESTDIR/shard{N-1}


def shard_folder_name(index: int) -> str:
    return f"{SHARD_PREFIX}{index}"


def data_shards(data: str | Path) -> list[str]:
    """The data-bin folders of DATA: one for a plain folder, several for ``a:b:c``. A folder whose
    own name holds a ':' stays one folder."""
    data = str(data)
    if ":" not in data or Path(data).is_dir():
        return [data]
    shards = data.split(":")
    if not all(shards):
        raise UsageError(f"DATA {data}: an empty shard path; join the data-bin folders with single ':', "
                         "e.g. data-bin/shard0:data-bin/shard1")
    for k, shard in enumerate(shards):
        if not Path(shard).is_dir():
            raise UsageError(f"DATA {data}: shard {k} ({shard}) is no folder; give existing data-bin folders "
                             "joined by ':' (nmt-preprocess --num-shards writes DESTDIR/shard0, DESTDIR/shard1, ...)")
    return shards


def first_shard(data: str | Path) -> str:
    """The folder the dictionaries, validation and test splits are read from."""
    return data_shards(data)[0]


def train_shard_index(epoch: int, num_shards: int) -> int:
    """Which shard epoch ``epoch`` (counted from 1) trains on."""
    return (epoch - 1) % num_shards


def deal_lines(text: Path, parts: list[Path]) -> None:
    """Write line i of ``text`` to ``parts[i mod n]``: every shard gets the same mix of the corpus,
    whatever order its sources were concatenated in. One streaming pass (memory does not grow with
    the file), in the calling process, so the result does not depend on nmt-preprocess --workers."""
    outs = [open(p, "wb") for p in parts]
    try:
        with open(text, "rb") as f:
            for i, line in enumerate(f):
                outs[i % len(outs)].write(line if line.endswith(b"\n") else line + b"\n")
    finally:
        for out in outs:
            out.close()
