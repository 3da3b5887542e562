"""Refusals that keep nmt-generate, nmt-interactive and nmt-validate from blowing up or printing
nothing without a word: a beam wider than the vocabulary, inputs longer than the model's positions,
non-finite weights, non-finite scores.

Each runs once per run, per model or per finished sentence, never per decoding step (decoding
speed is benchmarked)."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Callable, Sequence

import numpy as np

from nmt.config.generate import GenerationConfig
from nmt.data.dictionary import Dictionary
from nmt.errors import ConfigError, DataError, NmtError

_FILLER = re.compile(r"madeupword\d{4}")  # Dictionary.pad_to_multiple's padding symbols


def real_symbols(dictionary: Dictionary) -> int:
    """Symbols of ``dictionary`` without the ``madeupwordNNNN`` fillers padding it to a multiple of 8
    (they are never in the data, so no hypothesis is made of them)."""
    symbols = list(dictionary.symbols)
    n = len(symbols)
    while n > dictionary.nspecial and _FILLER.fullmatch(symbols[n - 1]):
        n -= 1
    return n


def check_beam_fits_vocabulary(beam: int, tgt_dict: Dictionary, dict_name: str) -> None:
    """Refuse a --beam (or a number of samples) above the target vocabulary's real symbols minus one,
    fairseq's cap (pad is never produced). Beyond it a beam holds no more distinct hypotheses, only
    rows: memory grows as sentences x beam x vocabulary (--beam 100000 reached 24 GB). Refused rather
    than capped as fairseq does, so the run is the one asked for (its BLEU line names the beam)."""
    limit = real_symbols(tgt_dict) - 1
    if beam > limit:
        raise ConfigError(f"--beam {beam}: must be at most {limit}, the target dictionary's real symbols "
                          f"minus one ({dict_name} has {limit + 1}); lower --beam (for --search sampling "
                          "it is the number of samples)")


def within_positions(gen: GenerationConfig, positions: int) -> GenerationConfig:
    """``gen`` (a GenerationConfig) with --no-repeat-ngram-size above the models' ``positions`` lowered
    to them. No output is longer than that, so the search is the same, but the rules compare it with
    step tensors, which cannot hold a value beyond int64. (A --min-len that high is refused before:
    nmt.generation.search_options.check_fits_model.)"""
    return dataclasses.replace(gen, no_repeat_ngram_size=min(gen.no_repeat_ngram_size, positions))


def check_lengths(lengths: Sequence[int] | np.ndarray, limit: int, where: Callable[[int], str], side: str,
                  fix: str) -> None:
    """Refuse the first of ``lengths`` above ``limit``, the model's ``max_{side}_positions`` (side:
    "source" or "target"): the model was not built for it, and running it costs memory quadratic
    in its length. ``where(k)`` names the k-th sentence; ``fix`` says what to do."""
    too_long = np.flatnonzero(np.asarray(lengths, dtype=np.int64) > limit)
    if len(too_long):
        k = int(too_long[0])
        raise DataError(f"{where(k)}: {int(lengths[k])} {side} tokens (eos included), more than the {limit} "
                        f"positions the model was built for (model.max_{side}_positions); {fix}")


def check_finite_hypotheses(hyps: Sequence[Any], where: str) -> None:
    """Refuse a finished sentence with no hypothesis or a non-finite score instead of printing
    nothing or ``nan``: the model's log-probabilities (overflowing weights or activations) or the
    score's penalties (--lenpen, --unkpen) were not finite numbers."""
    scores = [h.score for h in hyps]
    if scores and all(math.isfinite(s) for s in scores):
        return
    got = ("found no hypothesis with a finite score" if not scores
           else f"scored a hypothesis {next(s for s in scores if not math.isfinite(s))}")
    raise NmtError(f"{where}: the search {got}: the model's log-probabilities or --lenpen/--unkpen are not "
                   "finite numbers; check the checkpoint (nmt-validate gives its loss), or with --bf16 try without")
