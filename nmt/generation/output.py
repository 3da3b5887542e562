"""fairseq's generation output format, and corpus BLEU with sacreBLEU.

Per sentence: ``S-id`` source, ``T-id`` reference (model tokens), then for each hypothesis
``H-id<TAB>score<TAB>tokens``, ``D-id<TAB>score<TAB>detokenized``, ``P-id<TAB>positional scores``
and with --print-alignment ``A-id<TAB>src-tgt ...``. Scores are log-probabilities in base 2, as
fairseq prints them.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from nmt.generation.inference import hard_alignment
from nmt.generation.search import Hypothesis

LN2 = math.log(2)


def hypothesis_lines(sid: int, hyp: Hypothesis, tgt_dict: Any, detokenize: Any, src_len: int,
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


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[str, str]:
    """sacreBLEU's corpus BLEU line (``BLEU = 34.30 65.1/...``) and its signature."""
    from sacrebleu.metrics import BLEU

    metric = BLEU()
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return str(result), str(metric.get_signature())
