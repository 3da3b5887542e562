"""fairseq data-bin folders: its dictionaries and its ``MMIDIDX`` memory-mapped datasets, and a
lossless conversion into an nmt data-bin (``nmt-import-fairseq data``).

We convert rather than read fairseq folders in place: the rest of nmt then
meets one data format, and the conversion checks every id against the dictionary once.

fairseq's ``dict.<lang>.txt`` uses our convention already (``<s> <pad> </s> <unk>`` implied in
front, then "symbol count" lines, madeupword fillers included); it may also mark a line with
``#fairseq:overwrite``. Its ``.idx`` (little-endian)::

    magic    9 bytes  b"MMIDIDX\\x00\\x00"
    version  uint64   1
    dtype    uint8    code of the .bin integer type (see FAIRSEQ_DTYPES)
    count    uint64   number of sentences N
    sizes    int32[N]  tokens per sentence (eos included)
    pointers int64[N]  byte offset of sentence i in .bin
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np

from nmt.data.dictionary import Dictionary
from nmt.data.indexed_dataset import ShardWriter, write_index
from nmt.errors import DataError, UsageError
from nmt.fileio import atomic_write_text

MAGIC = b"MMIDIDX\x00\x00"
LEGACY_MAGIC = b"TNTIDX\x00\x00"  # fairseq's older "lazy"/"cached" format
HEADER = struct.Struct("<9sQBQ")  # magic, version, dtype code, count -> 26 bytes
FAIRSEQ_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16, 9: np.uint32,
                  10: np.uint64}
OVERWRITE_FLAG = "#fairseq:overwrite"
_BLOCK = 1 << 20  # sentences converted at a time (bounded memory on big corpora)


def read_fairseq_dictionary(path: str | Path) -> Dictionary:
    """A fairseq ``dict.txt`` as our Dictionary (same indices: the specials are implicit in both)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such fairseq dictionary; give the data-bin folder fairseq-preprocess wrote")
    d = Dictionary()
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            text = line.rstrip("\n")
            overwrite = text.endswith(" " + OVERWRITE_FLAG)
            if overwrite:
                text = text[: -len(OVERWRITE_FLAG) - 1]
            parts = text.rsplit(" ", 1)
            if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
                raise DataError(f"{path}, line {lineno}: expected \"<symbol> <count>\", got {line.strip()!r}")
            sym, count = parts
            if sym in d and not overwrite:
                raise DataError(f"{path}, line {lineno}: duplicate symbol {sym!r} (fairseq needs "
                                f"{OVERWRITE_FLAG} to allow it)")
            if sym in d:
                d.counts[d.index(sym)] = int(count)
            else:
                d.add_symbol(sym, int(count))
    return d


class FairseqIndexedDataset:
    """Read-only memory-mapped view of a fairseq ``MMIDIDX`` pair: ``ds[i]`` -> numpy id array."""

    def __init__(self, prefix: str | Path):
        self.prefix = Path(prefix)
        idx, binf = Path(f"{prefix}.idx"), Path(f"{prefix}.bin")
        for p in (idx, binf):
            if not p.is_file():
                raise DataError(f"{p}: missing; a fairseq dataset is a .idx/.bin pair")
        with open(idx, "rb") as f:
            head = f.read(HEADER.size)
        if head[:8] == LEGACY_MAGIC:
            raise DataError(f"{idx}: fairseq's legacy 'cached/lazy' format is not supported; re-binarize it with "
                            "fairseq-preprocess --dataset-impl mmap")
        if len(head) < HEADER.size or head[:9] != MAGIC:
            raise DataError(f"{idx}: not a fairseq MMIDIDX index (bad magic)")
        _, version, code, count = HEADER.unpack(head)
        if version != 1 or code not in FAIRSEQ_DTYPES:
            raise DataError(f"{idx}: unsupported MMIDIDX version {version} / dtype code {code}")
        self.dtype = np.dtype(FAIRSEQ_DTYPES[code])
        if (idx.stat().st_size - HEADER.size) != 12 * count:
            raise DataError(f"{idx}: {idx.stat().st_size} bytes do not hold {count} sizes and pointers (truncated?)")
        self.sizes = np.memmap(idx, dtype=np.int32, mode="r", offset=HEADER.size, shape=(count,)) if count \
            else np.zeros(0, np.int32)
        self.pointers = np.memmap(idx, dtype=np.int64, mode="r", offset=HEADER.size + 4 * count, shape=(count,)) \
            if count else np.zeros(0, np.int64)
        self.tokens = np.memmap(binf, dtype=self.dtype, mode="r") if binf.stat().st_size else np.zeros(0, self.dtype)
        item = self.dtype.itemsize
        if count:
            expected = np.concatenate([[0], np.cumsum(self.sizes[:-1], dtype=np.int64)]) * item
            if (not np.array_equal(self.pointers, expected)
                    or int(self.sizes.sum(dtype=np.int64)) != len(self.tokens)):
                raise DataError(f"{self.prefix}: .idx pointers do not match the .bin (truncated or not contiguous)")

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int) -> np.ndarray:
        start = int(self.pointers[i]) // self.dtype.itemsize
        return np.asarray(self.tokens[start:start + int(self.sizes[i])])


def find_pairs(folder: Path) -> dict[tuple[str, str], list[str]]:
    """{(src, tgt): [splits]} of every ``SPLIT.SRC-TGT.LANG.idx`` in a fairseq data-bin."""
    pairs: dict[tuple[str, str], set[str]] = {}
    for idx in folder.glob("*.idx"):
        m = re.fullmatch(r"(.+)\.([^.]+)-([^.]+)\.([^.]+)\.idx", idx.name)
        if m and m.group(4) in (m.group(2), m.group(3)):
            pairs.setdefault((m.group(2), m.group(3)), set()).add(m.group(1))
    return {k: sorted(v) for k, v in pairs.items()}


def _choose_pair(folder: Path, src: str | None, tgt: str | None) -> tuple[str, str, list[str]]:
    pairs = find_pairs(folder)
    if src and tgt:
        if (src, tgt) not in pairs:
            raise UsageError(f"--path {folder}: no {src}-{tgt} splits (*.{src}-{tgt}.{src}.idx); found "
                             f"{', '.join(f'{a}-{b}' for a, b in pairs) or 'none'}")
        return src, tgt, pairs[(src, tgt)]
    if len(pairs) != 1:
        raise UsageError(f"--path {folder}: {'no fairseq splits found' if not pairs else 'several language pairs'}; "
                         "pass --source-lang and --target-lang")
    (a, b), splits = next(iter(pairs.items()))
    return a, b, splits


def _convert_split(prefix_in: Path, prefix_out: Path, dictionary: Dictionary) -> dict[str, Any]:
    """Copy one fairseq dataset into our .bin/.idx, checking every id; returns its stats."""
    ds = FairseqIndexedDataset(prefix_in)
    dtype = dictionary.dtype()
    writer = ShardWriter(prefix_out, dtype)
    unk = 0
    for start in range(0, len(ds), _BLOCK):
        sizes = np.asarray(ds.sizes[start:start + _BLOCK])
        begin = int(ds.pointers[start]) // ds.dtype.itemsize
        ids = np.asarray(ds.tokens[begin:begin + int(sizes.sum(dtype=np.int64))]).astype(np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= len(dictionary)):
            raise DataError(f"{prefix_in}.bin: id {int(ids.max())} is outside its dictionary "
                            f"({len(dictionary)} symbols); the dict.*.txt beside it is not the one it was made with")
        ends = np.cumsum(sizes.astype(np.int64)) - 1
        if len(ends) and not bool((ids[ends] == dictionary.eos()).all()):
            raise DataError(f"{prefix_in}: a sentence does not end with </s>; not a fairseq translation data-bin")
        unk += int((ids == dictionary.unk()).sum())
        writer.add_block(ids.astype(dtype), sizes)
    writer.close()
    write_index(f"{prefix_out}.sizes", prefix_out, dtype)
    Path(f"{prefix_out}.sizes").unlink()
    tokens = int(ds.sizes.sum(dtype=np.int64)) if len(ds) else 0
    words = tokens - len(ds)
    return {"sentences": len(ds), "tokens": tokens, "words": words, "unk": unk,
            "unk_rate": round(unk / words, 6) if words else 0.0, "empty_lines": int((ds.sizes == 1).sum())}


def _pipeline(tokenizer: str, bpe: str, bpe_codes: str | None, langs: list[str]) -> tuple[dict[str, Any], Path | None]:
    """The metadata.json ``pipeline`` entry of the text processing the fairseq data went through."""
    from nmt.data.text_pipeline import TEXT_PLUGIN_KINDS, codes_file_name
    from nmt.plugin_loader import load_plugins
    from nmt.registry import BPE, TOKENIZER

    load_plugins(None, TEXT_PLUGIN_KINDS)
    specs = {}
    for registry, name in ((TOKENIZER, tokenizer), (BPE, bpe)):
        cfg = registry.options(name)  # an unknown name is refused here, with the choices
        specs[registry.kind] = {"name": name, **dataclasses.asdict(cfg)}
    codes = None
    if bpe_codes:
        codes = Path(bpe_codes)
        if not codes.is_file():
            raise UsageError(f"--bpe-codes {codes}: no such file; give the BPE codes the fairseq data was made with")
        specs["bpe"]["codes"] = {lang: codes_file_name(None, BPE.get(bpe).codes_file) for lang in langs}
    elif bpe != "none":
        raise UsageError(f"--bpe {bpe} needs --bpe-codes FILE (the codes the fairseq data was made with)")
    return {"tokenizer": specs["tokenizer"], "bpe": specs["bpe"], "user_dir": None}, codes


def convert_data_bin(fairseq_dir: str | Path, output: str | Path, *, source_lang: str | None = None,
                     target_lang: str | None = None, tokenizer: str = "space", bpe: str = "none",
                     bpe_codes: str | None = None, overwrite: bool = False) -> dict[str, Any]:
    """Convert every split of a fairseq data-bin into an nmt data-bin at ``output`` (written in a
    temp folder and renamed into place); returns the metadata written."""
    from nmt.data.data_dir import destdir_state, job_fingerprint, move_into_place, new_temp_dir
    from nmt.data.metadata import read_metadata
    from nmt.data.preprocess import data_bin_metadata

    folder, dest = Path(fairseq_dir), Path(output)
    if not folder.is_dir():
        raise UsageError(f"--path {folder}: no such folder; give the data-bin folder fairseq-preprocess wrote")
    src, tgt, splits = _choose_pair(folder, source_lang, target_lang)
    inputs = [p for s in splits for lang in (src, tgt) for p in (folder / f"{s}.{src}-{tgt}.{lang}.idx",
                                                                 folder / f"{s}.{src}-{tgt}.{lang}.bin")]
    inputs += [folder / f"dict.{lang}.txt" for lang in (src, tgt)] + ([Path(bpe_codes)] if bpe_codes else [])
    pipeline, codes = _pipeline(tokenizer, bpe, bpe_codes, [src, tgt])
    fingerprint = job_fingerprint({"import": "fairseq", "pipeline": pipeline, "langs": [src, tgt]},
                                  [p for p in inputs if p.exists()], None)
    state = destdir_state(dest, fingerprint, overwrite)
    if state == "same":
        return read_metadata(dest)
    dicts = {lang: read_fairseq_dictionary(folder / f"dict.{lang}.txt") for lang in (src, tgt)}
    tmp = new_temp_dir(dest)
    try:
        for lang, d in dicts.items():
            d.save(tmp / f"dict.{lang}.txt")
        if codes is not None:  # one joint file, named as the BPE plugin names its codes
            shutil.copyfile(codes, tmp / pipeline["bpe"]["codes"][src])
        split_meta = {s: {lang: _convert_split(folder / f"{s}.{src}-{tgt}.{lang}", tmp / f"{s}.{src}-{tgt}.{lang}",
                                               dicts[lang]) for lang in (src, tgt)} for s in splits}
        meta = data_bin_metadata(
            src, tgt, dicts, joined=dicts[src] == dicts[tgt], pipeline=pipeline, splits=split_meta,
            fingerprint=fingerprint, imported_from={"toolkit": "fairseq", "path": str(folder.resolve())},
            raw_text="none: a fairseq data-bin keeps no raw text; give nmt-generate --reference for BLEU")
        atomic_write_text(tmp / "metadata.json", json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
        move_into_place(tmp, dest, state)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta

