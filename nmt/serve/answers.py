"""API results as JSON: Translation objects in OpenNMT-py's and in nmt's native shape."""

from __future__ import annotations

from typing import Any, Sequence

from nmt.api import Translation


def _pairs(alignment: list[tuple[int, int]] | None) -> str | None:
    return None if alignment is None else " ".join(f"{s}-{t}" for s, t in alignment)


def onmt_answer(sources: Sequence[str], found: Sequence[Translation], nbest: int) -> list[list[dict[str, Any]]]:
    """OpenNMT-py's answer: one list per rank, each holding that rank's hypothesis of every sentence."""
    out: list[list[dict[str, Any]]] = [[] for _ in range(nbest)]
    for src, translation in zip(sources, found):
        for rank in range(nbest):
            hyp = translation.hypotheses[min(rank, len(translation.hypotheses) - 1)]
            item: dict[str, Any] = {"src": src, "tgt": hyp.text, "n_best": nbest, "pred_score": hyp.score}
            if hyp.alignment is not None:
                item["align"] = _pairs(hyp.alignment)
            out[rank].append(item)
    return out


def native_answer(found: Sequence[Translation], source_lang: str, target_lang: str) -> dict[str, Any]:
    """nmt's answer: per sentence its tokens, hypotheses and (when asked) attention weights."""
    translations = []
    for t in found:
        item: dict[str, Any] = {
            "source": t.source, "source_tokens": t.source_tokens,
            "hypotheses": [{"text": h.text, "tokens": h.tokens, "score": h.score,
                            **({"alignment": h.alignment} if h.alignment is not None else {})}
                           for h in t.hypotheses],
        }
        if t.constraints:
            item["constraints"] = t.constraints
            item["unmet_constraints"] = t.unmet_constraints
        if t.attention is not None and t.hypotheses:
            weights = t.attention.float()  # (L, H, T, S)
            item["attention"] = {
                "layers": weights.size(0), "heads": weights.size(1),
                "source_tokens": [*t.source_tokens, "</s>"], "target_tokens": [*t.hypotheses[0].tokens, "</s>"],
                "weights": (weights * 10000).round().div(10000).tolist(),  # 4 decimals keep the answer small
            }
        translations.append(item)
    return {"source_lang": source_lang, "target_lang": target_lang, "translations": translations}
