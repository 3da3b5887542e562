"""`--tokenizer moses`: the Moses tokenizer (sacremoses), without XML escaping, as
``sacremoses -l LANG tokenize -x``; decoding runs the Moses detokenizer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nmt.data.text_pipeline import Tokenizer
from nmt.fields import opt
from nmt.registry import register_tokenizer


@dataclass
class MosesConfig:
    moses_aggressive_dash_splits: bool = opt(False, "Split hyphenated words (Moses -a).")


@register_tokenizer("moses", config=MosesConfig, help="Moses tokenizer (sacremoses, no escaping).")
class MosesTokenizer(Tokenizer[MosesConfig]):
    def __init__(self, cfg: MosesConfig, lang: str):
        super().__init__(cfg, lang)
        from sacremoses import MosesDetokenizer, MosesTokenizer as _Tok

        self._tok = _Tok(lang=lang)
        self._detok = MosesDetokenizer(lang=lang)
        self._aggressive = cfg.moses_aggressive_dash_splits

    def encode(self, line: str) -> str:
        return self._tok.tokenize(line, escape=False, return_str=True,
                                  aggressive_dash_splits=self._aggressive)

    def decode(self, line: str) -> str:
        text: Any = self._detok.detokenize(line.split(), return_str=True)
        return text
