"""`--bpe none`: whole tokens, no subwords."""

from __future__ import annotations

from pathlib import Path

from nmt.data.text_pipeline import BPE
from nmt.registry import NoOptions, register_bpe


@register_bpe("none", help="No subword splitting.")
class NoBPE(BPE[NoOptions]):
    identity = True

    @classmethod
    def learn(cls, cfg: NoOptions, word_counts: dict[str, int], codes_path: Path) -> None:  # nothing to learn
        return None

    def encode(self, line: str) -> str:
        return line

    def decode(self, line: str) -> str:
        return line
