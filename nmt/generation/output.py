"""fairseq's generation output format, and corpus BLEU with sacreBLEU.

Per sentence: ``S-id`` source, ``T-id`` reference (model tokens), then for each hypothesis
``H-id<TAB>score<TAB>tokens``, ``D-id<TAB>score<TAB>detokenized``, ``P-id<TAB>positional scores``
and with --print-alignment ``A-id<TAB>src-tgt ...``. Scores are log-probabilities in base 2, as
fairseq prints them.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from nmt.data.dictionary import Dictionary
from nmt.generation.alignment import hard_alignment
from nmt.generation.search import Hypothesis

LN2 = math.log(2)


def hypothesis_lines(sid: int, hyp: Hypothesis, tgt_dict: Dictionary, detokenize: Callable[[str], str], src_len: int,
                     print_alignment: bool = False) -> tuple[list[str], str]:
    """The H/D/P(/A) lines of one hypothesis, and its detokenized text."""
    tokens = tgt_dict.string(hyp.tokens)
    detok = detokenize(tokens)
    score = hyp.score / LN2
    positional = " ".join(f"{s / LN2:.4f}" for s in hyp.positional_scores.tolist())
    lines = [f"H-{sid}\t{score:.4f}\t{tokens}", f"D-{sid}\t{score:.4f}\t{detok}", f"P-{sid}\t{positional}"]
    if print_alignment and hyp.attention is not None:
        pairs = " ".join(f"{s}-{t}" for s, t in hard_alignment(hyp.attention, src_len))
        lines.append(f"A-{sid}\t{pairs}")
    return lines, detok


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str], tokenize: str | None = None,
                  chrf: bool = True) -> list[tuple[Any, str]]:
    """sacreBLEU's corpus BLEU and (with ``chrf``) chrF, each as (score, signature); ``str(score)`` is
    sacreBLEU's line (``BLEU = 34.30 65.1/...``, ``chrF2 = 58.12``), ``score.score`` the number.
    ``tokenize``: BLEU's tokenizer [default: sacreBLEU's 13a]; "none" scores text already tokenized."""
    from sacrebleu.metrics import BLEU, CHRF

    metrics: list[Any] = [BLEU(tokenize=tokenize) if tokenize else BLEU()] + ([CHRF()] if chrf else [])
    refs = [list(references)]
    return [(m.corpus_score(list(hypotheses), refs), str(m.get_signature())) for m in metrics]
