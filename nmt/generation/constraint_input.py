"""Constraints as users give them (raw target text) turned into what the constrained search takes (target ids),
and what every interface says back about them.

A constraint is a phrase of raw target text. It goes through the model's target tokenizer and BPE, exactly as
nmt-preprocess made the target side (so "Hüte" becomes the pieces the model writes, "H@@ üte"), then through the
target dictionary. fairseq-interactive's input format is kept: ``source<TAB>phrase 1<TAB>phrase 2``. What cannot
be forced is refused in one line naming the sentence: an empty phrase, a piece outside the target dictionary (it
could only be written as <unk>), phrases needing more tokens than the sentence's output length limit.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from nmt.config.generate import GenerationConfig
from nmt.data.dictionary import Dictionary
from nmt.data.text_pipeline import TextPipeline
from nmt.errors import DataError, UsageError
from nmt.generation.constraints import ConstraintMap, SentenceConstraints, min_tokens
from nmt.generation.search import length_limits

SEPARATOR = "\t"  # fairseq-interactive --constraints: the source, then each phrase, tab-separated
CONSTRAINED = "constrained"  # the search plugin that forces phrases
FORCEABLE_SEARCHES = ("beam", CONSTRAINED)  # beam search (the default) becomes the constrained one


def read_constraints_file(path: str, sentences: int, split: str) -> list[list[str]]:
    """nmt-generate --constraints-file: per sentence of the split (one line each, ``sentences`` of them), its
    tab-separated phrases; a blank line gives none."""
    from nmt.data.corpus_files import read_lines

    if not Path(path).is_file():
        raise UsageError(f"--constraints-file {path}: no such file; give one line of tab-separated target phrases "
                         "per sentence of the split")
    lines = list(read_lines(path))
    if len(lines) != sentences:
        raise DataError(f"--constraints-file {path}: {len(lines)} lines, but split {split} has {sentences} "
                        "sentences; give one line per sentence (an empty line for none)")
    return [line.rstrip("\r").split(SEPARATOR) if line.strip() else [] for line in lines]


def split_line(line: str) -> tuple[str, list[str]]:
    """fairseq's ``source<TAB>phrase<TAB>phrase``: (source, phrases)."""
    source, *phrases = line.split(SEPARATOR)
    return source, phrases


class PhraseEncoder:
    """Raw target phrases -> target ids, through the target side's tokenizer and BPE and its dictionary."""

    def __init__(self, pipeline: TextPipeline, tgt_dict: Dictionary, dict_name: str):
        self.pipeline = pipeline
        self.tgt_dict = tgt_dict
        self.dict_name = dict_name  # the dictionary's file, for messages

    @functools.cached_property
    def mid_word(self) -> Optional[torch.Tensor]:
        """(V,) bool over the target dictionary: the pieces a word goes on after (the target BPE's
        ``continues_word``), so that a forced phrase starts where a word starts; None when no piece is one (no
        subwords, sentencepiece). Built once: every sentence's constraints share it."""
        bpe = self.pipeline.bpe
        flags = torch.tensor([bpe.continues_word(s) for s in self.tgt_dict.symbols], dtype=torch.bool)
        return flags if bool(flags.any()) else None

    def pieces(self, phrase: str) -> list[str]:
        """The model's target tokens (subwords) of ``phrase``."""
        return self.pipeline.encode(phrase).split()

    def encode(self, phrase: object, where: str) -> torch.Tensor:
        """The target ids (n,) of ``phrase``; a UsageError naming ``where`` when it cannot be forced."""
        if not isinstance(phrase, str):
            raise UsageError(f"{where}: a constraint is a {type(phrase).__name__}, not a string; give raw target "
                             "text")
        pieces = self.pieces(phrase)
        if not pieces:
            raise UsageError(f"{where}: an empty constraint; give the target words to force (or leave the "
                             "empty one out)")
        ids = [self.tgt_dict.index(p) for p in pieces]
        unknown = [p for p, i in zip(pieces, ids) if i < self.tgt_dict.nspecial]  # <unk>, or a special symbol
        if unknown:
            shown = ", ".join(repr(p) for p in dict.fromkeys(unknown))
            raise UsageError(f"{where}: constraint {phrase!r}: its piece(s) {shown} are not in the target "
                             f"dictionary ({self.dict_name}), so the model could only write them as <unk>; force "
                             "words the model knows")
        return torch.tensor(ids, dtype=torch.long)


@dataclass(frozen=True)
class Terms:
    """The phrases one sentence's translation must contain: as given (raw text) and as the search takes them."""

    texts: tuple[str, ...]
    constraints: SentenceConstraints


def make_terms(phrases: Sequence[tuple[str, torch.Tensor]], ordered: bool,
               mid_word: Optional[torch.Tensor] = None) -> Optional[Terms]:
    """The Terms of (text, ids) ``phrases``, a phrase given twice (the same ids) kept once; None without any.
    ``mid_word``: the target pieces no phrase may follow (PhraseEncoder.mid_word)."""
    kept: dict[tuple[int, ...], tuple[str, torch.Tensor]] = {}
    for text, ids in phrases:
        kept.setdefault(tuple(ids.tolist()), (text, ids))
    if not kept:
        return None
    texts, tensors = zip(*kept.values())
    return Terms(tuple(texts), SentenceConstraints(tuple(tensors), ordered, mid_word))


def output_limit(gen: GenerationConfig, max_target_positions: int, source_length: int) -> int:
    """The most tokens a sentence of ``source_length`` source ids (</s> included) may get before its </s>."""
    return int(length_limits(gen, max_target_positions, torch.tensor([source_length]))[0])


def check_fits(terms: Terms, limit: int, where: str) -> None:
    """Refuse phrases that need more target tokens than the sentence's output length ``limit``: forcing them
    could only cut them off."""
    need = min_tokens(terms.constraints)
    if need > limit:
        raise UsageError(f"{where}: the constraints need {need} target tokens, more than the {limit} the "
                         "output may have (--max-len-a, --max-len-b and the model's positions); give fewer or "
                         "shorter constraints, or raise --max-len-b")


def constraint_map(terms: Sequence[Optional[Terms]]) -> ConstraintMap:
    """The search's map of sentence k (its index in ``terms``) to its constraints, for the sentences with any."""
    return {k: t.constraints for k, t in enumerate(terms) if t is not None}


def with_constrained_search(gen: GenerationConfig, named: Optional[str] = None) -> GenerationConfig:
    """``gen`` searching with the constrained search, which forces the phrases. Beam search, the default, is
    replaced by it; ``named``: how the caller named the search explicitly (e.g. "--search beam"), which is
    then kept and refused, as is a search that cannot force phrases (sampling, greedy)."""
    name = gen.search.get("name")
    if name == CONSTRAINED:
        return gen
    if name == "beam" and named is None:
        return dataclasses.replace(gen, search={"name": CONSTRAINED})
    shown = named or f"--search {name}"
    raise UsageError(f"{shown}: cannot force terms (constraints or a glossary); leave the search out (forced terms "
                     f"choose the {CONSTRAINED} search) or give no constraints")


def forces_terms(gen: GenerationConfig) -> bool:
    """Whether ``gen`` runs the search that forces phrases."""
    return gen.search.get("name") == CONSTRAINED


def contains(tokens: Sequence[int], phrase: Sequence[int], start: int = 0) -> int:
    """The end of the first occurrence of ``phrase`` in ``tokens`` at or after ``start``, or -1."""
    n = len(phrase)
    for i in range(start, len(tokens) - n + 1):
        if list(tokens[i:i + n]) == list(phrase):
            return i + n
    return -1


def unmet_phrases(terms: Optional[Terms], tokens: torch.Tensor) -> list[str]:
    """The phrases of ``terms`` that the output ``tokens`` does not contain (for ordered ones: from the first
    that does not follow the previous one)."""
    if terms is None:
        return []
    out = tokens.tolist()
    phrases = [p.tolist() for p in terms.constraints.phrases]
    if not terms.constraints.ordered:
        return [text for text, phrase in zip(terms.texts, phrases) if contains(out, phrase) < 0]
    at = 0
    for k, phrase in enumerate(phrases):
        at = contains(out, phrase, at)
        if at < 0:
            return list(terms.texts[k:])
    return []


def unmet_line(where: str, unmet: Sequence[str], terms: Terms) -> str:
    """The warning that a translation lacks some of its forced phrases."""
    shown = ", ".join(repr(t) for t in unmet)
    return (f"warning: {where}: {len(unmet)} of {len(terms.texts)} constraint(s) not met: {shown} (they did not fit "
            "the output length limit, or their order; raise --max-len-b or check the constraints)")
