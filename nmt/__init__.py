"""nmt: a small, fast, honest re-creation of fairseq for Transformer translation (nmt.load: see nmt.api)."""

from typing import Any


def __getattr__(name: str) -> Any:  # nmt.load / nmt.TranslationModel without importing torch on `import nmt`
    if name in ("load", "TranslationModel", "Translation", "TranslatedHypothesis"):
        from nmt import api

        return getattr(api, name)
    raise AttributeError(f"module 'nmt' has no attribute {name!r}")
