"""The shapes of requests and answers: OpenNMT-py's /translate (so its clients work unchanged) and nmt's
native /v1/translate. The pydantic models validate requests and give the OpenAPI page its schemas.

Requests are read strictly (``STRICT``): JSON types as they are, no conversion, and no field the shape does not
name. The ranges of the search options are not repeated here: the model checks them, as it checks those of
``nmt.load(...).translate`` (nmt.generation.search_options)."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

STRICT = ConfigDict(strict=True, extra="forbid")


class OnmtSentence(BaseModel):
    """One item of OpenNMT-py's request list: ``{"src": "...", "id": 100}``. OpenNMT-py's server reads these two
    keys (and ``ref``, a target prefix, which nmt does not support); any other key is refused by name."""

    model_config = STRICT

    src: str = Field(description="The raw sentence to translate (empty or only whitespace: translated to \"\").")
    id: Optional[int] = Field(None, description="The model id (nmt-serve --model-id); may be left out.")


class OnmtHypothesis(BaseModel):
    src: str
    tgt: str
    n_best: int
    pred_score: float
    align: Optional[str] = Field(None, description="'source-target' token index pairs, with --print-alignment.")


class NativeRequest(BaseModel):
    """nmt's own request: the sentences plus the search to run on them."""

    model_config = STRICT

    text: list[str] = Field(description="Raw sentences to translate (an empty or whitespace-only one: \"\").")
    beam: Optional[int] = Field(None, description="Beam size, at least 1 and at most nmt-serve --max-beam "
                                                  "[default: the server's --beam].")
    nbest: Optional[int] = Field(None, description="Hypotheses per sentence, at least 1 and at most beam.")
    lenpen: Optional[float] = Field(None, description="Length penalty, in [-5, 5] [default: the server's --lenpen].")
    max_len_a: Optional[float] = Field(None, description="Output length limit: max_len_a * source tokens + "
                                                         "max_len_b (at most the model's positions); >= 0.")
    max_len_b: Optional[int] = Field(None, description="See max_len_a; >= 0.")
    min_len: Optional[int] = Field(None, description="Minimum output length, at most the limit of the shortest "
                                                     "source (max_len_a + max_len_b).")
    no_repeat_ngram_size: Optional[int] = Field(None, description="Never repeat an n-gram of this size (0: off).")
    alignment: bool = Field(False, description="Return each hypothesis' hard alignment.")
    attention: bool = Field(False, description="Return the best hypothesis' encoder-decoder attention, every "
                                               "layer and head (the page's heatmaps).")
    constraints: Optional[list[list[str]]] = Field(
        None, description="Per sentence (as many lists as text), raw target phrases its translation must contain "
                          "([] for none); with the glossary's, forced by the constrained search.")
    ordered: bool = Field(False, description="The constraints must appear in the order given.")
    glossary: Optional[dict[str, str]] = Field(
        None, description="{source term: target term} for this request, on top of the server's --glossary: a target "
                          "term is forced where its source term occurs.")

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
    constraints: Optional[list[str]] = Field(None, description="The phrases forced (given, then the glossary's), "
                                                               "when there were any.")
    unmet_constraints: Optional[list[str]] = Field(None, description="Those the best hypothesis does not contain "
                                                                     "(with constraints only).")


class NativeResponse(BaseModel):
    source_lang: str
    target_lang: str
    translations: list[NativeTranslation]


class ErrorResponse(BaseModel):
    error: str
    status: str = "error"
