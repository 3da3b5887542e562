"""The vocabulary: symbol <-> index, saved as fairseq-style ``dict.<lang>.txt`` ("token count" lines).

Numpy-only on purpose: ``nmt-preprocess`` must not pay torch's import time. ``encode_line`` (the
contract used by training/generation) imports torch lazily; the binarizer uses ``encode_ids``.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from nmt.bounded_read import regular_file
from nmt.errors import DataError
from nmt.fileio import atomic_write, bounded_lines

BOS, PAD, EOS, UNK = "<s>", "<pad>", "</s>", "<unk>"
SPECIALS = (BOS, PAD, EOS, UNK)
PAD_TO_MULTIPLE = 8  # a vocabulary size divisible by 8 keeps the output matmul on fast kernels
MAX_LINE_BYTES = 1 << 20  # a "symbol count" line is short: a longer one is not a dictionary line


class Dictionary:
    """Symbols in index order: ``<s>``=0, ``<pad>``=1, ``</s>``=2, ``<unk>``=3, then by decreasing count."""

    def __init__(self) -> None:
        self.symbols: list[str] = []
        self.counts: list[int] = []
        self.indices: dict[str, int] = {}
        for sym in SPECIALS:
            self.add_symbol(sym, 0)
        self.nspecial = len(SPECIALS)

    # -- building -------------------------------------------------------------------------
    def add_symbol(self, sym: str, count: int = 1) -> int:
        idx = self.indices.get(sym)
        if idx is not None:
            self.counts[idx] += count
            return idx
        idx = len(self.symbols)
        self.indices[sym] = idx
        self.symbols.append(sym)
        self.counts.append(count)
        return idx

    @classmethod
    def from_counts(cls, counts: Counter, threshold: int = 0, nwords: int = -1,
                    pad_to_multiple: int = PAD_TO_MULTIPLE) -> "Dictionary":
        """Build from token counts: keep symbols seen at least ``threshold`` times (0/1 keep all),
        at most ``nwords`` symbols in all, the specials included, as fairseq counts (<= 0: all);
        ties in count are broken by the symbol text so the result does not depend on the order
        the corpus was read in (or the number of workers)."""
        d = cls()
        ranked = sorted(((c, s) for s, c in counts.items() if s not in d.indices), key=lambda cs: (-cs[0], cs[1]))
        for count, sym in ranked:
            if (nwords > 0 and len(d) >= nwords) or count < threshold:
                break
            d.add_symbol(sym, count)
        d.pad_to_multiple(pad_to_multiple)
        return d

    def pad_to_multiple(self, multiple: int) -> None:
        i = 0
        while multiple > 1 and len(self) % multiple != 0:
            self.add_symbol(f"madeupword{i:04d}", 0)
            i += 1

    # -- lookup ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.symbols)

    def __getitem__(self, idx: int) -> str:
        return self.symbols[idx] if 0 <= idx < len(self.symbols) else UNK

    def __contains__(self, sym: str) -> bool:
        return sym in self.indices

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dictionary) and self.symbols == other.symbols

    def bos(self) -> int:
        return 0

    def pad(self) -> int:
        return 1

    def eos(self) -> int:
        return 2

    def unk(self) -> int:
        return 3

    def index(self, sym: str) -> int:
        return self.indices.get(sym, 3)

    def dtype(self) -> np.dtype:
        """The smallest unsigned integer type that holds every index (how `.bin` files store them)."""
        n = len(self)
        return np.dtype(np.uint8 if n <= 1 << 8 else np.uint16 if n <= 1 << 16 else np.uint32)

    # -- encode / decode ------------------------------------------------------------------
    def encode_ids(self, line: str, append_eos: bool = True) -> np.ndarray:
        """Whitespace-split ``line`` into indices (unknown -> ``<unk>``), as an int64 numpy array."""
        words = line.split()
        get, unk = self.indices.get, 3
        ids = np.fromiter((get(w, unk) for w in words), dtype=np.int64, count=len(words))
        return np.append(ids, 2) if append_eos else ids

    def encode_line(self, line: str, append_eos: bool = True):  # -> torch.LongTensor
        import torch

        return torch.from_numpy(self.encode_ids(line, append_eos))

    def string(self, ids: Iterable[int], bpe_symbol: str | None = None,
               extra_symbols_to_ignore: Sequence[int] = ()) -> str:
        """Indices -> text. Stops at the first eos or pad, skips bos; ``bpe_symbol`` (e.g. "@@ ")
        is removed, joining the subwords."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        skip = {0, *extra_symbols_to_ignore}
        out = []
        for i in ids:
            if i == 2 or i == 1:
                break
            if i not in skip:
                out.append(self[i])
        text = " ".join(out)
        if bpe_symbol:
            text = (text + " ").replace(bpe_symbol, "").rstrip()
        return text

    # -- files ----------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """One "symbol count" line per non-special symbol, in index order (fairseq's format)."""
        with atomic_write(path) as f:
            for sym, count in zip(self.symbols[self.nspecial:], self.counts[self.nspecial:]):
                f.write(f"{sym} {count}\n")

    @classmethod
    def load(cls, path: str | Path) -> "Dictionary":
        path = Path(path)
        fix = "re-run nmt-preprocess, or give the dict.LANG.txt it wrote"
        regular_file(path, DataError, fix,  # a FIFO in its place would block the read
                     missing=f"{path}: no such dictionary file; run nmt-preprocess first or fix the path")
        d = cls()
        with open(path, "rb") as f:
            for lineno, raw in enumerate(bounded_lines(f, MAX_LINE_BYTES), 1):
                try:  # the line is not quoted in errors: a damaged or foreign file may hold anything
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise DataError(f"{path}, line {lineno}: not UTF-8 text (a binary file?); {fix}") from None
                parts = line.rstrip("\n").rsplit(" ", 1)
                if len(raw) > MAX_LINE_BYTES or len(parts) != 2 or not parts[1].lstrip("-").isdigit():
                    raise DataError(f"{path}, line {lineno}: expected \"<symbol> <count>\"; {fix}")
                sym, count = parts
                if sym in d.indices and sym not in SPECIALS:
                    raise DataError(f"{path}, line {lineno}: a symbol listed twice; {fix}")
                d.add_symbol(sym, int(count))
        return d

    def fingerprint(self) -> str:
        """sha256 of the symbol list: checkpoints use it to check they meet the same dictionary."""
        return hashlib.sha256("\n".join(self.symbols).encode("utf-8")).hexdigest()
