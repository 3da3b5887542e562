"""What the batcher tests share: toy sentences of the exported toy model's words, and a DynamicBatcher over a
loaded model with small limits that each test may override."""

from __future__ import annotations

from nmt.serve.batcher import DynamicBatcher

TOY_SENTENCES = ["a b c", "d e", "f g h i", "b a", "c c d e f", "g", "h i a b", "e d c"]


def toy_batcher(model, **limits) -> DynamicBatcher:
    options = {"max_tokens": 8192, "max_sentences": 4, "wait_seconds": 0.0, "max_queue": 256, **limits}
    return DynamicBatcher(model, **options)
