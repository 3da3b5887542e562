"""`--bpe none`: whole tokens, no subwords."""

from __future__ import annotations

from nmt.data.text_pipeline import BPE
from nmt.registry import register_bpe


@register_bpe("none", help="No subword splitting.")
class NoBPE(BPE):
    identity = True

    @classmethod
    def learn(cls, cfg, word_counts, codes_path) -> None:  # nothing to learn
        return None

    def encode(self, line: str) -> str:
        return line

    def decode(self, line: str) -> str:
        return line
