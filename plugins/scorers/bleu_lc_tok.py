"""BLEU on the scale of the Multi30k literature: hypotheses and references lowercased, punctuation-normalized
and Moses-tokenized with aggressive hyphen splitting (``lowercase.perl | normalize-punctuation.perl -l L |
tokenizer.perl -a -l L``, here with sacremoses), then BLEU on those tokens (sacreBLEU, ``tokenize='none'``), as
multi-bleu.perl scores the papers' tokenized, lowercased outputs.

The steps are sacremoses' own calls, not the ``moses`` tokenizer plugin: a figure on this scale must not move when
a data-bin's tokenizer options do."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Sequence

from nmt.registry import register_scorer
from nmt.scoring import Score, Scorer


@dataclass
class BleuLcTokConfig:
    """bleu_lc_tok has no options of its own: its steps are its name."""


@register_scorer("bleu_lc_tok", config=BleuLcTokConfig)
class LowercasedTokenizedBleu(Scorer[BleuLcTokConfig]):
    """BLEU of lowercased, punctuation-normalized, Moses-tokenized (-a) text: the Multi30k papers' scale."""

    def __init__(self, cfg: BleuLcTokConfig, lang: str):
        super().__init__(cfg, lang)
        from sacremoses import MosesPunctNormalizer, MosesTokenizer

        self._normalizer = MosesPunctNormalizer(lang=lang)
        self._tokenizer = MosesTokenizer(lang=lang)
        steps = f"lc|punct-norm:{lang}|moses-tok-a:{lang}|sacremoses:{importlib.metadata.version('sacremoses')}"
        self.steps = f"bleu_lc_tok|{steps}"

    def prepare(self, line: str) -> str:
        """``line`` as the papers score it: lowercased, punctuation normalized, Moses tokens joined by spaces."""
        normalized = self._normalizer.normalize(line.lower())
        tokens: str = self._tokenizer.tokenize(normalized, aggressive_dash_splits=True, escape=False,
                                               return_str=True)
        return tokens

    def score(self, hypotheses: Sequence[str], references: Sequence[str]) -> list[Score]:
        from sacrebleu.metrics import BLEU

        # lowercase=True only puts case:lc in the signature: the text is lowercased already
        metric = BLEU(lowercase=True, tokenize="none", force=True)
        bleu = metric.corpus_score([self.prepare(h) for h in hypotheses], [[self.prepare(r) for r in references]])
        text = "BLEU (lc-tok)" + str(bleu)[len("BLEU"):]
        return [Score(float(bleu.score), text, "bleu_lc_tok signature", f"{self.steps}|{metric.get_signature()}")]
