"""The configuration of ``nmt-import-fairseq data`` and ``nmt-import-fairseq checkpoint``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from nmt.config.common import CommonConfig
from nmt.fields import opt


@dataclass
class ImportDataJob:
    """`nmt-import-fairseq data --path FAIRSEQ_DATA_BIN --output DIR`: convert a fairseq data-bin."""

    common: CommonConfig = field(default_factory=CommonConfig)
    path: Optional[str] = opt(None, "The fairseq data-bin folder (dict.*.txt and MMIDIDX .idx/.bin files).")
    output: Optional[str] = opt(None, "The nmt data-bin folder to write.")
    source_lang: Optional[str] = opt(None, "Source language [default: the only pair in --path].")
    target_lang: Optional[str] = opt(None, "Target language [default: the only pair in --path].")
    tokenizer: str = opt("space", "Tokenizer the fairseq text went through (nmt-generate undoes it for BLEU), "
                                  "e.g. moses.")
    bpe: str = opt("none", "Subword model the fairseq text went through, e.g. subword_nmt or sentencepiece (needs "
                           "--bpe-codes).")
    bpe_codes: Optional[str] = opt(None, "The BPE codes file the fairseq data was made with, or its sentencepiece "
                                         ".model file (copied into --output).")
    overwrite: bool = opt(False, "Replace --output when it holds other data.")


@dataclass
class ImportCheckpointJob:
    """`nmt-import-fairseq checkpoint --path X.pt --data DIR --output Y.pt`: convert a fairseq model."""

    common: CommonConfig = field(default_factory=CommonConfig)
    path: Optional[str] = opt(None, "The fairseq checkpoint (e.g. checkpoint_best.pt).")
    data: Optional[str] = opt(None, "The data-bin it was trained on (fairseq's, or ours from "
                                    "nmt-import-fairseq data): its dictionaries are used.")
    output: Optional[str] = opt(None, "The nmt checkpoint to write.")
    source_lang: Optional[str] = opt(None, "Source language [default: from --data].")
    target_lang: Optional[str] = opt(None, "Target language [default: from --data].")
