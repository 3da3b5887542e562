"""The shapes of requests and answers: OpenNMT-py's /translate (so its clients work unchanged) and nmt's
native /v1/translate. The pydantic models validate requests and give the OpenAPI page its schemas."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field


class OnmtSentence(BaseModel):
    """One item of OpenNMT-py's request list: ``{"src": "...", "id": 100}``."""

    model_config = ConfigDict(extra="ignore")  # OpenNMT-py clients may send keys of their own

    src: str = Field(description="The raw sentence to translate.")
    id: Optional[int] = Field(None, description="The model id (nmt-serve --model-id); may be left out.")


class OnmtHypothesis(BaseModel):
    src: str
    tgt: str
    n_best: int
    pred_score: float
    align: Optional[str] = Field(None, description="'source-target' token index pairs, with --print-alignment.")


class NativeRequest(BaseModel):
    """nmt's own request: the sentences plus the search to run on them."""

    model_config = ConfigDict(extra="forbid")

    text: list[str] = Field(description="Raw sentences to translate.")
    beam: Optional[int] = Field(None, ge=1, description="Beam size [default: the server's --beam].")
    nbest: Optional[int] = Field(None, ge=1, description="Hypotheses per sentence (at most beam).")
    lenpen: Optional[float] = Field(None, description="Length penalty [default: the server's --lenpen].")
    max_len_a: Optional[float] = Field(None, ge=0)
    max_len_b: Optional[int] = Field(None, ge=0)
    min_len: Optional[int] = Field(None, ge=0)
    no_repeat_ngram_size: Optional[int] = Field(None, ge=0)
    alignment: bool = Field(False, description="Return each hypothesis' hard alignment.")
    attention: bool = Field(False, description="Return the best hypothesis' encoder-decoder attention, every "
                                               "layer and head (the page's heatmaps).")

    def search_options(self) -> dict[str, Any]:
        names = ("beam", "nbest", "lenpen", "max_len_a", "max_len_b", "min_len", "no_repeat_ngram_size")
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}


class NativeHypothesis(BaseModel):
    text: str
    tokens: list[str]
    score: float = Field(description="Sum of natural-log token probabilities / length**lenpen.")
    alignment: Optional[list[tuple[int, int]]] = None


class AttentionWeights(BaseModel):
    layers: int
    heads: int
    source_tokens: list[str] = Field(description="Columns: the source tokens and </s>.")
    target_tokens: list[str] = Field(description="Rows: the target tokens and </s>.")
    weights: list[list[list[list[float]]]] = Field(description="[layer][head][target][source].")


class NativeTranslation(BaseModel):
    source: str
    source_tokens: list[str]
    hypotheses: list[NativeHypothesis]
    attention: Optional[AttentionWeights] = None


class NativeResponse(BaseModel):
    source_lang: str
    target_lang: str
    translations: list[NativeTranslation]


class ErrorResponse(BaseModel):
    error: str
    status: str = "error"
