"""Parallel sentences for training and evaluation: (id, source, target) samples and padded batches.

Token data stays memory-mapped (``IndexedDataset``); torch tensors are made per sample, so
opening a data-bin folder costs no RAM and imports torch only when samples are asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from nmt.data.dictionary import Dictionary
from nmt.data.indexed_dataset import IndexedDataset, dataset_exists
from nmt.errors import DataError, UsageError


class LanguagePairDataset:
    """``ds[i] -> {"id": i, "source": LongTensor, "target": LongTensor}`` (both end with eos).

    ``decoder_start`` is the symbol ``prev_output_tokens`` starts with: ``<s>`` by default;
    imported fairseq models were trained starting from ``</s>``."""

    def __init__(self, src: IndexedDataset, src_dict: Dictionary, tgt: IndexedDataset | None = None,
                 tgt_dict: Dictionary | None = None, decoder_start: int | None = None):
        if tgt is not None and len(src) != len(tgt):
            raise DataError(f"{src.prefix} has {len(src)} sentences but {tgt.prefix} has {len(tgt)}; "
                            "re-run nmt-preprocess")
        self.src, self.tgt = src, tgt
        self.src_dict, self.tgt_dict = src_dict, tgt_dict or src_dict
        self.src_sizes: np.ndarray = src.sizes
        self.tgt_sizes: np.ndarray | None = tgt.sizes if tgt is not None else None
        self.pad_idx = self.src_dict.pad()
        self.decoder_start = self.tgt_dict.bos() if decoder_start is None else decoder_start

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        sample = {"id": i, "source": torch.from_numpy(self.src[i].astype(np.int64))}
        sample["target"] = torch.from_numpy(self.tgt[i].astype(np.int64)) if self.tgt is not None else None
        return sample

    def num_tokens(self, i: int) -> int:
        """What sentence ``i`` costs in a batch: the longer of its two sides."""
        if self.tgt_sizes is None:
            return int(self.src_sizes[i])
        return int(max(self.src_sizes[i], self.tgt_sizes[i]))

    def size(self, i: int) -> tuple[int, int]:
        return int(self.src_sizes[i]), int(self.tgt_sizes[i]) if self.tgt_sizes is not None else 0

    def collater(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        """Right-padded batch; ``prev_output_tokens`` = ``[decoder_start] + target[:-1]``."""
        import torch

        if not samples:
            return {}
        pad = self.pad_idx
        ids = torch.tensor([s["id"] for s in samples], dtype=torch.long)  # (B,)
        src_lengths = torch.tensor([len(s["source"]) for s in samples], dtype=torch.long)  # (B,)
        src_tokens = _pad([s["source"] for s in samples], pad)  # (B, S)
        batch: dict[str, Any] = {
            "id": ids,
            "nsentences": len(samples),
            "net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths},
        }
        if samples[0].get("target") is not None:
            targets = [s["target"] for s in samples]
            target = _pad(targets, pad)  # (B, T)
            prev = _pad([torch.cat([t.new_tensor([self.decoder_start]), t[:-1]]) for t in targets], pad)  # (B, T)
            batch["target"] = target
            batch["net_input"]["prev_output_tokens"] = prev
            batch["ntokens"] = int(sum(len(t) for t in targets))
        else:
            batch["target"] = None
            batch["ntokens"] = int(src_lengths.sum())
        return batch


def _pad(seqs: list, pad: int):  # -> (B, max len) LongTensor, right-padded
    import torch

    out = torch.full((len(seqs), max(len(s) for s in seqs)), pad, dtype=torch.long)  # (B, L)
    for row, s in enumerate(seqs):
        out[row, :len(s)] = s
    return out


def load_language_pair(data_dir: str | Path, split: str, src: str, tgt: str,
                       decoder_start: int | None = None) -> LanguagePairDataset:
    """Open ``split`` of a folder written by ``nmt-preprocess`` (``{split}.{src}-{tgt}.{lang}.bin/.idx``)."""
    data_dir = Path(data_dir)
    prefixes = {lang: data_dir / f"{split}.{src}-{tgt}.{lang}" for lang in (src, tgt)}
    for prefix in prefixes.values():
        if not dataset_exists(prefix):
            raise UsageError(f"{data_dir}: no split {split!r} for {src}-{tgt} ({prefix}.bin/.idx missing); "
                             "check --source-lang/--target-lang and the split name, or re-run nmt-preprocess")
    src_dict = Dictionary.load(data_dir / f"dict.{src}.txt")
    tgt_dict = Dictionary.load(data_dir / f"dict.{tgt}.txt")
    if tgt_dict == src_dict:
        tgt_dict = src_dict  # one object for a joined dictionary
    sides = {}
    for lang, dictionary in ((src, src_dict), (tgt, tgt_dict)):
        sides[lang] = IndexedDataset(prefixes[lang])
        sides[lang].verify(len(dictionary), data_dir / f"dict.{lang}.txt", dictionary.eos())
    return LanguagePairDataset(sides[src], src_dict, sides[tgt], tgt_dict, decoder_start=decoder_start)
