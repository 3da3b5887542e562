"""sacreBLEU's corpus BLEU and chrF2 of detokenized, cased text with its default tokenizer (13a): the figures
nmt-generate has always printed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from nmt.generation.output import corpus_scores
from nmt.registry import register_scorer
from nmt.scoring import Score, Scorer


@dataclass
class SacrebleuConfig:
    """sacrebleu has no options of its own."""


@register_scorer("sacrebleu", config=SacrebleuConfig)
class SacrebleuScorer(Scorer[SacrebleuConfig]):
    """Detokenized, cased BLEU and chrF2 (sacreBLEU's defaults); always printed."""

    def score(self, hypotheses: Sequence[str], references: Sequence[str]) -> list[Score]:
        (bleu, signature), (chrf, chrf_signature) = corpus_scores(hypotheses, references)
        return [Score(float(bleu.score), str(bleu), "sacreBLEU signature", signature, "detokenized"),
                Score(float(chrf.score), str(chrf), "sacreBLEU chrF signature", chrf_signature, "detokenized")]
