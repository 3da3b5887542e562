"""Scorers: how a translated split is scored, chosen by name with ``--scoring`` (nmt-generate, nmt-validate).

A scorer gets the detokenized hypotheses and the raw references of a split and returns :class:`Score` lines,
each with its figure and a signature naming every step between the text and the figure: two figures are
comparable only when their signatures are the same. sacreBLEU's detokenized, cased BLEU and chrF2 (the
``sacrebleu`` scorer) are always printed first; ``--scoring`` adds others, such as ``bleu_lc_tok``, the
lowercased, Moses-tokenized BLEU the Multi30k papers report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Sequence

from nmt.registry import SCORER, OptionsT

ALWAYS = "sacrebleu"  # the scorer every --scoring list starts with


@dataclass(frozen=True)
class Score:
    """One figure: ``text`` is its line (``BLEU = 40.26 71.3/...``), ``value`` the number, ``label`` and
    ``signature`` its signature line, ``note`` what the scored text is (``detokenized``; may be empty)."""

    value: float
    text: str
    label: str
    signature: str
    note: str = ""


class Scorer(Generic[OptionsT]):
    """Scores hypotheses against references; ``cfg`` is the scorer's own options, ``lang`` the target language
    (for language rules such as Moses tokenization)."""

    def __init__(self, cfg: OptionsT, lang: str):
        self.cfg = cfg
        self.lang = lang

    def score(self, hypotheses: Sequence[str], references: Sequence[str]) -> list[Score]:
        """Corpus figures of ``hypotheses`` (detokenized) against ``references`` (raw text), one line each."""
        raise NotImplementedError


def scorer_names(text: str) -> list[str]:
    """The scorers of ``--scoring a,b``: sacrebleu first, then the others named, once each; an unknown name is
    a ConfigError naming the choices (``nmt.registry``)."""
    names = [ALWAYS]
    for name in (n.strip() for n in (text or "").split(",")):
        if name and name not in names:
            SCORER.entry(name, "--scoring")  # refuses an unknown name, with the choices
            names.append(name)
    return names


def build_scorers(text: str, lang: str) -> list[Scorer]:
    """The scorers ``--scoring`` names (see :func:`scorer_names`) for target language ``lang``."""
    return [SCORER.build(name, None, lang) for name in scorer_names(text)]


def score_lines(scorers: Sequence[Scorer], hypotheses: Sequence[str], references: Sequence[str], head: str,
                against: str) -> list[str]:
    """Two lines per figure: ``HEAD: BLEU = ...`` and ``LABEL: SIGNATURE (NOTE, against AGAINST)``."""
    lines = []
    for scorer in scorers:
        for s in scorer.score(hypotheses, references):
            note = f"{s.note}, " if s.note else ""
            lines += [f"{head}: {s.text}", f"{s.label}: {s.signature} ({note}against {against})"]
    return lines
