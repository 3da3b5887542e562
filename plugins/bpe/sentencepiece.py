"""`--bpe sentencepiece`: subword pieces of Kudo & Richardson (2018) with the sentencepiece package
(``pip install 'nmt[sentencepiece]'``), a unigram language model or BPE learned on whole sentences.

sentencepiece is meant for raw text, and so is the default ``--tokenizer space``: a piece that starts a
word begins with "▁" (U+2581), so joining the pieces and turning "▁" back into spaces gives the
detokenized text. With ``--tokenizer moses`` it learns on Moses tokens instead, and decoding then
ends with the Moses detokenizer (the pipeline undoes its steps in reverse order)."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from nmt.data.corpus_files import count_lines, read_lines
from nmt.data.text_pipeline import BPE, normalize_space
from nmt.errors import ConfigError, DataError, UsageError
from nmt.fields import opt
from nmt.fileio import atomic_write
from nmt.registry import register_bpe

SPACE = "\u2581"  # "▁": the space before a word, kept in the piece that starts it
# sentencepiece's default. Fixed rather than --workers: the unigram model's pieces depend on the number of
# training threads, and the data-bin must not depend on --workers.
TRAIN_THREADS = 16
_INSTALL = "pip install 'nmt[sentencepiece]'"
_MODEL_FIX = "re-run nmt-preprocess to learn it again"


def _sentencepiece() -> Any:
    """The sentencepiece module, or one line naming the extra to install."""
    try:
        import sentencepiece
    except ImportError:
        raise UsageError(f"--bpe sentencepiece needs the sentencepiece package: {_INSTALL}") from None
    return sentencepiece


@dataclass
class SentencePieceConfig:
    spm_model_type: str = opt("unigram", "Subword model sentencepiece learns: a unigram language model or BPE.",
                              choices=["unigram", "bpe"])
    spm_vocab_size: int = opt(8000, "Pieces in the model (its <unk> included), learned on the training split.",
                              low=2)
    spm_character_coverage: float = opt(1.0, "Share of the training characters the pieces must cover; the rarer "
                                             "ones stay out of every piece (a run of them is one token).",
                                        low=0.98, high=1.0)
    spm_input_sentence_size: int = opt(1_000_000, "Learn on at most this many training sentences (both languages' "
                                                  "together for joint codes), a random sample drawn with "
                                                  "--spm-sample-seed (0: all of them).", low=0)
    spm_sample_seed: int = opt(1, "Seed of that sample: the same seed gives the same model.", low=0, high=2**32 - 1)
    spm_normalization: str = opt("nmt_nfkc", "sentencepiece's Unicode normalization of the text before it is cut "
                                             "into pieces (identity: none, so decoding gives back the exact text).",
                                 choices=["nmt_nfkc", "nfkc", "identity"])


def sampled_lines(files: list[Path], size: int, seed: int) -> Iterator[str]:
    """The non-empty lines of ``files`` (read as one text), whitespace-normalised as the pipeline feeds
    them to encode(); only a uniform random sample of ``size`` lines when they hold more (0: all).
    The sample depends on ``seed`` alone, and lines keep their order."""
    total = sum(count_lines(f) for f in files)
    chosen: set[int] | None = None
    if 0 < size < total:
        chosen = set(random.Random(seed).sample(range(total), size))
    number = 0
    for path in files:
        for line in read_lines(path):
            if chosen is None or number in chosen:
                line = normalize_space(line)
                if line:
                    yield line
            number += 1


def _learning_error(message: str, cfg: SentencePieceConfig) -> Exception:
    """sentencepiece's failure as one line naming the option to change (its messages hold no text of the corpus)."""
    too_high = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", message)
    if too_high:
        return ConfigError(f"--spm-vocab-size {cfg.spm_vocab_size}: the training split holds too few distinct pieces "
                           f"for that; give at most {too_high.group(2)}")
    too_low = re.search(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)", message)
    if too_low:
        return ConfigError(f"--spm-vocab-size {cfg.spm_vocab_size}: the training split has more characters to cover; "
                           f"give at least {too_low.group(2)} (or lower --spm-character-coverage)")
    if "sentences_.empty()" in message:
        return DataError("--bpe sentencepiece: the training split holds no text to learn from; give a --trainpref "
                         "with sentences in it")
    reason = re.sub(r"^\w+: src/\S+ \[(.*)\]\s*", r"\1", message.strip().splitlines()[0] if message.strip() else "")
    return DataError(f"--bpe sentencepiece: sentencepiece cannot learn a model from the training split ({reason})")


@register_bpe("sentencepiece", config=SentencePieceConfig,
              help="Unigram or BPE pieces with sentencepiece, on raw text (pip install 'nmt[sentencepiece]').")
class SentencePieceBPE(BPE[SentencePieceConfig]):
    codes_file = "spm.model"
    learns_from_text = True

    def __init__(self, cfg: SentencePieceConfig, codes_path: Path | None):
        super().__init__(cfg, codes_path)
        if codes_path is None or not Path(codes_path).is_file():
            raise DataError(f"sentencepiece model {codes_path} is missing; re-run nmt-preprocess to learn it")
        spm = _sentencepiece()
        try:
            self._sp = spm.SentencePieceProcessor(model_file=str(codes_path))
        except (RuntimeError, OSError):  # its message quotes the path, nothing of the file
            raise DataError(f"{codes_path}: not a sentencepiece model (damaged?); {_MODEL_FIX}") from None

    @classmethod
    def learn_from_text(cls, cfg: SentencePieceConfig, text_files: list[Path], codes_path: Path) -> None:
        spm = _sentencepiece()
        sentences = sampled_lines(text_files, cfg.spm_input_sentence_size, cfg.spm_sample_seed)
        with atomic_write(codes_path, "wb") as out:
            try:
                # no <s> / </s> pieces: the model's dictionary adds its own; only <unk> (id 0) is kept
                spm.SentencePieceTrainer.train(
                    sentence_iterator=sentences, model_writer=out, model_type=cfg.spm_model_type,
                    vocab_size=cfg.spm_vocab_size, character_coverage=cfg.spm_character_coverage,
                    normalization_rule_name=cfg.spm_normalization, input_sentence_size=0,
                    num_threads=TRAIN_THREADS, bos_id=-1, eos_id=-1, minloglevel=2)
            except RuntimeError as e:
                raise _learning_error(str(e), cfg) from None

    def encode(self, line: str) -> str:
        return " ".join(self._sp.encode(line, out_type=str))

    def decode(self, line: str) -> str:
        # not sentencepiece's decode_pieces: it turns a piece the model lacks (a character outside
        # --spm-character-coverage, the dictionary's <unk>) into " ⁇ " and keeps "▁" in it
        return normalize_space("".join(line.split()).replace(SPACE, " "))
