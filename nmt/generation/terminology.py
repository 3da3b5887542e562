"""One sentence's forced phrases, the same way in every interface: the phrases given with it (fairseq's
tab-separated input, the API's and the server's ``constraints``) plus the target terms of the glossary entries
whose source terms occur in it, encoded like the target side and checked against its output length limit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

import torch

from nmt.config.generate import GenerationConfig
from nmt.data.data_bin import DataDir
from nmt.data.text_pipeline import TextPipeline
from nmt.errors import UsageError
from nmt.generation.constraint_input import PhraseEncoder, Terms, check_fits, make_terms, output_limit
from nmt.generation.glossary import Glossary, glossary_of, read_glossary


@dataclass
class Terminology:
    """A model's source and target text pipelines and dictionaries, with an optional glossary."""

    encoder: PhraseEncoder
    source: TextPipeline
    data: DataDir
    glossary: Optional[Glossary] = None

    @classmethod
    def of(cls, data: DataDir, glossary: str | Path | Mapping[str, str] | None = None, *,
           source: Optional[TextPipeline] = None, target: Optional[TextPipeline] = None) -> "Terminology":
        """The terminology of the data-bin (or model folder) ``data``, with ``glossary``: a file (--glossary) or
        ``{source term: target term}``; ``source`` and ``target``: its text pipelines, when loaded already."""
        from nmt.data.text_pipeline import load_text_pipeline

        encoder = PhraseEncoder(target or load_text_pipeline(data.path, data.tgt), data.tgt_dict,
                                str(data.path / f"dict.{data.tgt}.txt"))
        terminology = cls(encoder, source or load_text_pipeline(data.path, data.src), data)
        terminology.glossary = terminology.read(glossary)
        return terminology

    def words(self, text: str) -> list[str]:
        """The source tokenizer's words of raw text."""
        return self.source.tokenizer.encode(text).split()

    def words_of_ids(self, ids: torch.Tensor) -> list[str]:
        """The source tokenizer's words of binarized source ids (BPE undone), as in a data-bin split."""
        return self.source.bpe.decode(self.data.src_dict.string(ids)).split()

    def read(self, glossary: str | Path | Mapping[str, str] | None, name: str = "glossary") -> Optional[Glossary]:
        """A glossary for this model: from a file, or a mapping (named ``name`` in messages); None for None."""
        if glossary is None:
            return None
        if isinstance(glossary, (str, Path)):
            return read_glossary(glossary, self.words, self.encoder)
        return glossary_of(glossary, self.words, self.encoder, name)

    def terms(self, words: list[str], given: Sequence[str], where: str, *, ordered: bool = False,
              glossary: Optional[Glossary] = None) -> Optional[Terms]:
        """The phrases a sentence (its source ``words``) must get: ``given`` ones, then the targets of the glossary
        entries that occur in it (this terminology's glossary with ``glossary`` added); None when there are none.
        A phrase that cannot be forced is a UsageError naming ``where``."""
        if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
            raise UsageError(f"{where}: constraints are a list of target phrases, not a {type(given).__name__}")
        phrases = [(text, self.encoder.encode(text, where)) for text in given]
        phrases = [(text.strip(), ids) for text, ids in phrases]  # encode() checked each is a string
        used = self.glossary.merged(glossary) if self.glossary is not None else glossary
        if used is not None:
            phrases += used.find(words)
        return make_terms(phrases, ordered, self.encoder.mid_word)

    def check(self, terms: Optional[Terms], gen: GenerationConfig, max_target_positions: int, source_length: int,
              where: str) -> None:
        """Refuse ``terms`` that need more tokens than the sentence (``source_length`` ids, </s> included) may
        get."""
        if terms is not None:
            check_fits(terms, output_limit(gen, max_target_positions, source_length), where)
