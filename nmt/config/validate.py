"""The configuration of `nmt-validate`: the validation loss of a checkpoint on a binarized split, and with
--scoring the scores of its translation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from nmt.config.common import CommonConfig
from nmt.config.generate import GenerationConfig
from nmt.fields import opt


@dataclass
class ValidateJob:
    """`nmt-validate DATA --path CKPT`: the checkpoint's own criterion on a split, as training reports it."""

    common: CommonConfig = field(default_factory=CommonConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)  # the search of --scoring
    data: Optional[str] = opt(None, "The data-bin folder written by nmt-preprocess (the positional DATA argument).",
                              cli=False)
    path: Optional[str] = opt(None, "Checkpoint(s) or model folder(s) to score, joined by ':' (each is scored "
                                    "on its own).")
    valid_subset: str = opt("valid", "The split(s) to score, comma separated.")
    source_lang: Optional[str] = opt(None, "Source language [default: read from the data-bin].")
    target_lang: Optional[str] = opt(None, "Target language [default: read from the data-bin].")
    max_tokens: Optional[int] = opt(4096, "Maximum tokens (source or target, padding included) in a batch.", low=1)
    batch_size: Optional[int] = opt(None, "Maximum sentences in a batch.", low=1)
    bf16: bool = opt(False, "Run the model under bfloat16 autocast, as --bf16 training validates.")
    threads: Optional[int] = opt(None, "torch intra-op threads [default: torch's choice].", low=1)
    scoring: str = opt("", "Also translate each split with the search options (--beam, --lenpen, --max-len-a, ...) "
                           "and score it: sacrebleu (detokenized, cased BLEU and chrF2; always printed first), "
                           "bleu_lc_tok (BLEU of lowercased, punctuation-normalized, Moses-tokenized (-a) text: the "
                           "Multi30k papers' scale), or a scorer plugin, comma separated (empty: the loss only).")
    skip_invalid_size_inputs_valid_test: bool = opt(False, "Skip sentences longer than the model's positions or "
                                                           "bigger than --max-tokens (counted in a warning) instead "
                                                           "of failing.")
