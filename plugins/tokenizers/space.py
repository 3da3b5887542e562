"""`--tokenizer space`: the text is already tokenized; only runs of whitespace are collapsed."""

from __future__ import annotations

from nmt.data.text_pipeline import Tokenizer
from nmt.registry import NoOptions, register_tokenizer


@register_tokenizer("space", help="Text is already tokenized: split on whitespace.")
class SpaceTokenizer(Tokenizer[NoOptions]):
    identity = True

    def encode(self, line: str) -> str:
        return " ".join(line.split())

    def decode(self, line: str) -> str:
        return line
