"""The binarized corpus format: ``<name>.bin`` (token ids) + ``<name>.idx`` (header, sizes, offsets).

``.idx`` layout (little-endian), see docs/data-format.md::

    magic  8 bytes  b"NMTIDX\\0\\0"
    version uint32  FORMAT_VERSION
    dtype   uint8   code of the .bin integer type (1=uint8, 2=uint16, 4=uint32), then 3 zero bytes
    count   uint64  number of sentences N
    ntokens uint64  number of tokens in .bin
    sizes   int32[N]     tokens per sentence (eos included)
    offsets int64[N+1]   start of sentence i in .bin, in tokens; offsets[N] = ntokens

Both files are opened with ``numpy.memmap``: opening costs no RAM whatever the corpus size and
``ds[i]`` is O(1). Writers stream: memory does not grow with the corpus.
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path
from typing import Iterable

import numpy as np

from nmt.errors import DataError

MAGIC = b"NMTIDX\x00\x00"
FORMAT_VERSION = 1
HEADER = struct.Struct("<8sIB3xQQ")  # magic, version, dtype code, count, ntokens -> 32 bytes
DTYPE_CODES = {1: np.uint8, 2: np.uint16, 4: np.uint32}
_BLOCK = 1 << 20  # sentences per block when streaming sizes -> offsets


def bin_path(prefix: str | Path) -> Path:
    return Path(f"{prefix}.bin")


def idx_path(prefix: str | Path) -> Path:
    return Path(f"{prefix}.idx")


def dataset_exists(prefix: str | Path) -> bool:
    return bin_path(prefix).is_file() and idx_path(prefix).is_file()


class ShardWriter:
    """Appends sentences to a raw ``.bin`` and a raw ``.sizes`` file (int32); no header yet.

    Workers each write one shard; :func:`merge_shards` joins them in order into the final dataset."""

    def __init__(self, prefix: str | Path, dtype: np.dtype):
        self.prefix = Path(prefix)
        self.dtype = np.dtype(dtype)
        self._bin = open(bin_path(prefix), "wb")
        self._sizes = open(f"{prefix}.sizes", "wb")

    def add_block(self, ids: np.ndarray, sizes: np.ndarray) -> None:
        """Append many sentences at once: ``ids`` all tokens concatenated, ``sizes`` per sentence."""
        self._bin.write(np.ascontiguousarray(ids, dtype=self.dtype).tobytes())
        self._sizes.write(np.ascontiguousarray(sizes, dtype=np.int32).tobytes())

    def close(self) -> None:
        self._bin.close()
        self._sizes.close()


def merge_shards(shard_prefixes: Iterable[str | Path], prefix: str | Path, dtype: np.dtype) -> None:
    """Concatenate shards (in the given order) into ``prefix.bin`` and write ``prefix.idx``."""
    shard_prefixes = [Path(p) for p in shard_prefixes]
    sizes_tmp = Path(f"{prefix}.sizes")
    with open(bin_path(prefix), "wb") as out_bin, open(sizes_tmp, "wb") as out_sizes:
        for shard in shard_prefixes:
            for src, dst in ((bin_path(shard), out_bin), (Path(f"{shard}.sizes"), out_sizes)):
                with open(src, "rb") as f:
                    shutil.copyfileobj(f, dst, 1 << 22)
                os.unlink(src)
    write_index(sizes_tmp, prefix, dtype)
    os.unlink(sizes_tmp)


def write_index(sizes_file: str | Path, prefix: str | Path, dtype: np.dtype) -> None:
    """Write ``prefix.idx`` from a raw int32 sizes file, streaming in blocks (bounded memory)."""
    itemsize = np.dtype(dtype).itemsize
    if itemsize not in DTYPE_CODES:
        raise ValueError(f"unsupported token dtype {dtype}")
    count = os.path.getsize(sizes_file) // 4
    ntokens = os.path.getsize(bin_path(prefix)) // itemsize
    sizes = np.memmap(sizes_file, dtype=np.int32, mode="r", shape=(count,)) if count else np.zeros(0, np.int32)
    with open(idx_path(prefix), "wb") as f:
        f.write(HEADER.pack(MAGIC, FORMAT_VERSION, itemsize, count, ntokens))
        for start in range(0, count, _BLOCK):
            f.write(np.asarray(sizes[start:start + _BLOCK], dtype=np.int32).tobytes())
        running = 0
        f.write(np.int64(0).tobytes())
        for start in range(0, count, _BLOCK):
            block = np.cumsum(sizes[start:start + _BLOCK], dtype=np.int64) + running
            f.write(block.tobytes())
            running = int(block[-1])
    if running != ntokens:
        raise DataError(f"{prefix}: sizes add up to {running} tokens but the .bin holds {ntokens}")
    del sizes


def write_dataset(prefix: str | Path, sentences: Iterable[np.ndarray], dtype: np.dtype) -> None:
    """Write a whole dataset from an iterable of id arrays (small data, tests, tools)."""
    writer = ShardWriter(prefix, dtype)
    for ids in sentences:
        writer.add_block(np.asarray(ids), np.array([len(ids)], dtype=np.int32))
    writer.close()
    write_index(f"{prefix}.sizes", prefix, dtype)
    os.unlink(f"{prefix}.sizes")


class IndexedDataset:
    """Read-only, memory-mapped view of a ``.bin``/``.idx`` pair: ``ds[i]`` -> numpy id array."""

    def __init__(self, prefix: str | Path):
        self.prefix = Path(prefix)
        idx, binf = idx_path(prefix), bin_path(prefix)
        for p in (idx, binf):
            if not p.is_file():
                raise DataError(f"{p}: missing; run nmt-preprocess to create the binarized data")
        with open(idx, "rb") as f:
            head = f.read(HEADER.size)
        if len(head) < HEADER.size or head[:8] != MAGIC:
            raise DataError(f"{idx}: not an nmt index file (bad magic); re-run nmt-preprocess")
        _, version, code, count, ntokens = HEADER.unpack(head)
        if version > FORMAT_VERSION:
            raise DataError(f"{idx}: format version {version}, newer than this nmt reads ({FORMAT_VERSION}); "
                            "upgrade nmt (pip install -U nmt) or re-run nmt-preprocess with this version")
        if version != FORMAT_VERSION:
            raise DataError(f"{idx}: format version {version}, this nmt reads version {FORMAT_VERSION}; "
                            "re-run nmt-preprocess with this version")
        if code not in DTYPE_CODES:
            raise DataError(f"{idx}: unknown token dtype code {code}")
        self.dtype = np.dtype(DTYPE_CODES[code])
        expected = HEADER.size + 4 * count + 8 * (count + 1)
        if os.path.getsize(idx) != expected or os.path.getsize(binf) != ntokens * self.dtype.itemsize:
            raise DataError(f"{self.prefix}: .idx/.bin sizes do not match (truncated copy?); re-run nmt-preprocess")
        self._count = count
        self.ntokens = ntokens
        self.sizes = (np.memmap(idx, dtype=np.int32, mode="r", offset=HEADER.size, shape=(count,))
                      if count else np.zeros(0, np.int32))
        self.offsets = np.memmap(idx, dtype=np.int64, mode="r", offset=HEADER.size + 4 * count, shape=(count + 1,))
        # np.memmap refuses empty files, and an empty split is legal
        self.tokens = np.memmap(binf, dtype=self.dtype, mode="r") if ntokens else np.zeros(0, self.dtype)

    def verify(self, vocab_size: int, dict_file: str | Path, eos: int = 2) -> None:
        """Check what the header cannot: sizes agree with offsets, every sentence ends with ``eos``,
        every id is below ``vocab_size`` (the dictionary in ``dict_file``). Vectorised over the memory
        maps in blocks, so a damaged split fails here in one line instead of deep in a run."""
        idx, fix = idx_path(self.prefix), "the data-bin is damaged; re-run nmt-preprocess"
        n = self._count
        if int(self.offsets[0]) != 0 or int(self.offsets[n]) != self.ntokens:
            raise DataError(f"{idx}: the offsets do not span the {self.ntokens} tokens of the .bin; {fix}")
        for start in range(0, n, _BLOCK):
            stop = min(start + _BLOCK, n)
            offsets = np.asarray(self.offsets[start:stop + 1])  # (B+1,)
            sizes = np.asarray(self.sizes[start:stop])  # (B,)
            bad = np.flatnonzero((np.diff(offsets) != sizes) | (sizes < 1) | (offsets[1:] > self.ntokens))
            if bad.size:
                raise DataError(f"{idx}: the size of sentence {start + int(bad[0])} does not match its offsets; "
                                f"{fix}")
            ends = np.asarray(self.tokens[offsets[1:] - 1])  # (B,) the last token of each sentence
            bad = np.flatnonzero(ends != eos)
            if bad.size:
                raise DataError(f"{bin_path(self.prefix)}: sentence {start + int(bad[0])} does not end with </s>; "
                                f"{fix}")
        if self.ntokens and vocab_size < 1 << (8 * self.dtype.itemsize) and int(self.tokens.max()) >= vocab_size:
            position = int(np.argmax(self.tokens >= vocab_size))
            sentence = int(np.searchsorted(self.offsets, position, side="right")) - 1
            raise DataError(f"{bin_path(self.prefix)}: sentence {sentence} holds token id {int(self.tokens[position])}"
                            f", but {Path(dict_file).name} has only {vocab_size} symbols; the .bin is damaged or the "
                            "dictionary was replaced; re-run nmt-preprocess")

    def __len__(self) -> int:
        return self._count

    def __getstate__(self) -> dict:
        return {"prefix": self.prefix}  # a spawned DataLoader worker re-opens the maps, copies nothing

    def __setstate__(self, state: dict) -> None:
        IndexedDataset.__init__(self, state["prefix"])

    def __getitem__(self, i: int) -> np.ndarray:
        if not -self._count <= i < self._count:
            raise IndexError(f"sentence {i} out of range for {self.prefix} ({self._count} sentences)")
        i %= self._count
        return np.asarray(self.tokens[self.offsets[i]:self.offsets[i + 1]])

    def __iter__(self):
        for i in range(self._count):
            yield self[i]
