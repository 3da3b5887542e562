"""What a constrained search is asked to put in its outputs: per sentence, target phrases (lexical constraints,
terminology) given as target-dictionary ids, and whether they must come in order.

This is the seam between whoever reads constraints (raw text, a glossary, a request) and the search that honours
them (``--search constrained``, nmt.plugins.search.constrained). A search that cannot honour them refuses them
(:func:`refuse_constraints`) instead of silently ignoring them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

import torch

from nmt.errors import UsageError


@dataclass(frozen=True)
class SentenceConstraints:
    """The target phrases one sentence's output must contain."""

    phrases: tuple[torch.Tensor, ...]  # each (n,) long target-dictionary ids, n >= 1, no eos/bos/pad
    ordered: bool = False  # the phrases must appear in this order (--constraints ordered)
    # (V,) bool over the target dictionary: the pieces a word goes on after (subword-nmt's "Fisch@@"); given, a
    # phrase starts only where a word starts (never "Fisch@@ markt" for "markt"). One tensor per model, shared by
    # every sentence; None: a phrase may start after any piece
    mid_word: Optional[torch.Tensor] = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        for p in self.phrases:
            if p.dim() != 1 or p.numel() == 0 or p.dtype != torch.long:
                raise ValueError("a constraint phrase is a non-empty 1-D long tensor of target ids")


# sentence id (the ids of a SourceBatch; for Search.search / Translator.translate, the row index) -> its
# constraints; a sentence without an entry (or with no phrases) is unconstrained
ConstraintMap = Mapping[int, SentenceConstraints]


def min_tokens(c: SentenceConstraints) -> int:
    """The fewest tokens an output meeting every phrase of ``c`` has before its eos (phrases do not overlap)."""
    return sum(int(p.numel()) for p in c.phrases)


def has_constraints(constraints: Optional[ConstraintMap]) -> bool:
    """Whether ``constraints`` asks anything of any sentence now."""
    return constraints is not None and any(c.phrases for c in constraints.values())


def refuse_constraints(strategy: str, constraints: Optional[ConstraintMap]) -> None:
    """A strategy that cannot force terms says so, in one line, when it is given some."""
    if has_constraints(constraints):
        raise UsageError(f"--search {strategy} cannot force terms (--constraints, --glossary); "
                         "use --search constrained (chosen by itself when --search is not given)")
