"""The base of every search strategy: what a hypothesis is, and the rules on next-token
log-probabilities that all strategies share (length limits, penalties, n-gram blocking).

A strategy is a plugin registered with ``nmt.registry.register_search``; it implements
:meth:`Search.search`. Use :func:`build_search` to get the one a config asks for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from nmt.config.generate import GenerationConfig
from nmt.errors import ConfigError
from nmt.generation.ensemble import EnsembleModel
from nmt.registry import SEARCH

NEG_INF = float("-inf")


@dataclass
class Hypothesis:
    """One output of a search for one sentence."""

    tokens: torch.Tensor  # (T,) generated ids, ending with eos, no leading bos
    score: float  # sum of log-probs / len^lenpen
    positional_scores: torch.Tensor  # (T,) log-prob of each token
    attention: torch.Tensor | None = None  # (T, S) cross-attention of each step, when asked for


@dataclass(frozen=True)
class Specials:
    """The dictionary indices a search needs."""

    bos: int
    eos: int
    pad: int
    unk: int

    @staticmethod
    def of(dictionary: Any, decoder_start: int | None = None) -> "Specials":
        """``decoder_start``: the first decoder input when not bos (fairseq-trained models use eos)."""
        bos = dictionary.bos() if decoder_start is None else decoder_start
        return Specials(bos, dictionary.eos(), dictionary.pad(), dictionary.unk())


class Search:
    """A search strategy. ``cfg`` holds the options shared by all strategies; ``plugin_cfg``
    the strategy's own (its registered config dataclass, or None)."""

    def __init__(self, cfg: GenerationConfig, specials: Specials, plugin_cfg: Any = None, seed: int = 1):
        if cfg.beam < 1:
            raise ConfigError(f"--beam {cfg.beam}: must be at least 1")
        if not 1 <= cfg.nbest <= cfg.beam:
            raise ConfigError(f"--nbest {cfg.nbest}: must be between 1 and --beam ({cfg.beam})")
        if cfg.no_repeat_ngram_size < 0:
            raise ConfigError(f"--no-repeat-ngram-size {cfg.no_repeat_ngram_size}: must be >= 0")
        self.cfg = cfg
        self.sp = specials
        self.plugin_cfg = plugin_cfg
        self.seed = seed

    def search(self, ens: EnsembleModel, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
               need_attn: bool = False) -> list[list[Hypothesis]]:
        """For each of the B sentences of ``src_tokens`` (B, S), its ``nbest`` hypotheses, best first."""
        raise NotImplementedError

    # --- shared rules -------------------------------------------------------------------------

    def max_lengths(self, ens: EnsembleModel, src_lengths: torch.Tensor) -> torch.Tensor:
        """Per sentence, the most tokens it may generate before its eos: (B,) long."""
        limit = self.cfg.max_len_a * src_lengths.double() + self.cfg.max_len_b  # (B,)
        cap = ens.max_target_positions() - 1  # the eos needs a position too
        return limit.floor().long().clamp(min=max(self.cfg.min_len, 1), max=cap)

    def apply_rules(self, lprobs: torch.Tensor, step: int, generated: torch.Tensor,
                    max_lens: torch.Tensor) -> torch.Tensor:
        """Adjust next-token log-probs (N, V) in place at ``step`` (tokens generated so far).

        ``generated`` (N, step) are those tokens; ``max_lens`` (N,) each row's length limit.
        bos/pad are never produced; eos is banned before --min-len and forced at the limit."""
        sp = self.sp
        lprobs[:, sp.pad] = NEG_INF
        if sp.bos != sp.eos:
            lprobs[:, sp.bos] = NEG_INF
        if self.cfg.unkpen:
            lprobs[:, sp.unk] -= self.cfg.unkpen
        if step < self.cfg.min_len:
            lprobs[:, sp.eos] = NEG_INF
        n = self.cfg.no_repeat_ngram_size
        if n > 0 and step >= n:
            block_repeated_ngrams(lprobs, generated, n)
        at_limit = max_lens <= step  # (N,)
        if bool(at_limit.any()):
            eos_lp = lprobs[:, sp.eos].clone()  # (N,)
            eos_lp = torch.where(torch.isfinite(eos_lp), eos_lp, torch.zeros_like(eos_lp))
            lprobs[at_limit] = NEG_INF
            lprobs[at_limit, sp.eos] = eos_lp[at_limit]
        return lprobs

    def normalise(self, total: torch.Tensor, length: torch.Tensor | int) -> torch.Tensor:
        """fairseq's length penalty: score / len^lenpen (len counts the eos)."""
        if isinstance(length, int):
            return total / (length ** self.cfg.lenpen)
        return total / length.double().pow(self.cfg.lenpen).to(total.dtype)


def block_repeated_ngrams(lprobs: torch.Tensor, generated: torch.Tensor, n: int) -> None:
    """Ban (set to -inf in ``lprobs`` (N, V)) every token that would complete an n-gram already
    present in ``generated`` (N, t). Vectorised: all rows and all earlier n-grams at once."""
    t = generated.size(1)
    if t < n:
        return
    windows = generated.unfold(1, n, 1)  # (N, t-n+1, n)
    tail = generated[:, t - n + 1:]  # (N, n-1) the prefix the next token would extend
    match = (windows[:, :, :-1] == tail.unsqueeze(1)).all(-1)  # (N, t-n+1)
    banned = torch.zeros_like(lprobs, dtype=torch.int32)  # (N, V)
    banned.scatter_add_(1, windows[:, :, -1], match.to(torch.int32))
    lprobs.masked_fill_(banned > 0, NEG_INF)


def build_search(cfg: GenerationConfig, dictionary: Any, seed: int = 1, decoder_start: int | None = None) -> Search:
    """The strategy ``cfg.search`` names; the beam strategy with --beam 1 becomes greedy."""
    choice = dict(cfg.search) if cfg.search else {"name": "beam"}
    name = choice.pop("name", "beam")
    if name == "beam" and cfg.beam == 1 and "greedy" in SEARCH:
        name = "greedy"
    entry = SEARCH.entry(name)
    plugin_cfg = None
    if entry.config is not None:
        from nmt.registry import to_dataclass

        plugin_cfg = to_dataclass(entry.config, choice)
    return entry.obj(cfg, Specials.of(dictionary, decoder_start), plugin_cfg, seed)
