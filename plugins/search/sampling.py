"""Sampling: each of --beam paths per sentence draws its next token from the model's
distribution, optionally sharpened (--temperature) and truncated (--sampling-topk / -topp)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nmt.config.fields import opt
from nmt.errors import ConfigError
from nmt.generation.path_search import PathSearch
from nmt.generation.search import NEG_INF
from nmt.registry import register_search


@dataclass
class SamplingConfig:
    sampling_topk: int = opt(-1, "Sample only from the k most probable tokens (-1: all).")
    sampling_topp: float = opt(-1.0, "Sample only from the smallest set of tokens whose probability reaches p "
                                     "(nucleus sampling; -1: off).")
    temperature: float = opt(1.0, "Divide the log-probabilities by this before sampling (< 1: sharper).")


@register_search("sampling", config=SamplingConfig)
class SamplingSearch(PathSearch):
    """Random sampling, seeded by --seed: the same seed gives the same samples."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        c: SamplingConfig = self.plugin_cfg or SamplingConfig()
        if c.temperature <= 0:
            raise ConfigError(f"--temperature {c.temperature}: must be > 0")
        if c.sampling_topp > 1:
            raise ConfigError(f"--sampling-topp {c.sampling_topp}: must be in (0, 1] (or -1 for off)")
        self.options = c
        self.generator = torch.Generator().manual_seed(self.seed)

    def paths_per_sentence(self) -> int:
        return self.cfg.beam

    def choose(self, lprobs: torch.Tensor) -> torch.Tensor:
        c = self.options
        logits = lprobs / c.temperature  # (N, V)
        if c.sampling_topk > 0:
            kth = logits.topk(min(c.sampling_topk, logits.size(1)), dim=1).values[:, -1:]  # (N, 1)
            logits = logits.masked_fill(logits < kth, NEG_INF)
        if 0 < c.sampling_topp < 1:
            sorted_lp, order = logits.sort(dim=1, descending=True)  # (N, V)
            probs = sorted_lp.softmax(dim=1)
            before = probs.cumsum(1) - probs  # mass of the better tokens
            drop_sorted = before >= c.sampling_topp  # keeps at least the best token
            drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
            logits = logits.masked_fill(drop, NEG_INF)
        probs = logits.softmax(dim=1)  # (N, V)
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(1)  # (N,)
