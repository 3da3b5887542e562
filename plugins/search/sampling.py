"""Sampling: each of --beam paths per sentence draws its next token from the model's
distribution, optionally sharpened (--temperature) and truncated (--sampling-topk / -topp)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nmt.config.generate import GenerationConfig
from nmt.errors import ConfigError, DataError
from nmt.fields import opt
from nmt.generation.path_search import PathSearch
from nmt.generation.search import NEG_INF, Specials
from nmt.registry import register_search


@dataclass
class SamplingConfig:
    sampling_topk: int = opt(-1, "Sample only from the k most probable tokens (-1: all).", low=-1)
    sampling_topp: float = opt(-1.0, "Sample only from the smallest set of tokens whose probability reaches p "
                                     "(nucleus sampling; -1: off).", low=-1, high=1)
    # bounded: below 0.01 sampling is all but greedy and above 100 all but uniform, and beyond both the float32
    # division leaves no finite probability to draw from
    temperature: float = opt(1.0, "Divide the log-probabilities by this before sampling (< 1: sharper).", low=0.01,
                             high=100)


@register_search("sampling", config=SamplingConfig)
class SamplingSearch(PathSearch[SamplingConfig]):
    """Random sampling, seeded by --seed: the same seed gives the same samples."""

    def __init__(self, cfg: SamplingConfig, gen: GenerationConfig, specials: Specials, seed: int = 1):
        super().__init__(cfg, gen, specials, seed)
        if cfg.sampling_topp == 0 or cfg.sampling_topk == 0:
            raise ConfigError("--sampling-topp / --sampling-topk 0 would leave nothing to sample; use -1 for off")
        self.generator = torch.Generator().manual_seed(self.seed)

    def paths_per_sentence(self) -> int:
        return self.gen.beam

    def choose(self, lprobs: torch.Tensor) -> torch.Tensor:
        c = self.cfg
        logits = lprobs / c.temperature  # (N, V)
        if c.sampling_topk > 0:
            kth = logits.topk(min(c.sampling_topk, logits.size(1)), dim=1).values[:, -1:]  # (N, 1)
            logits = logits.masked_fill(logits < kth, NEG_INF)
        if 0 < c.sampling_topp < 1:
            sorted_lp, order = logits.sort(dim=1, descending=True)  # (N, V)
            probs = sorted_lp.softmax(dim=1)
            before = probs.cumsum(1) - probs  # mass of the better tokens
            drop_sorted = before >= c.sampling_topp  # (N, V)
            drop_sorted[:, 0] = False  # the best token stays, even for a p below float32's smallest number
            drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
            logits = logits.masked_fill(drop, NEG_INF)
        probs = logits.softmax(dim=1)  # (N, V)
        try:
            return torch.multinomial(probs, 1, generator=self.generator).squeeze(1)  # (N,)
        except RuntimeError as e:  # NaN/inf probabilities: torch refuses to draw
            raise DataError("sampling: the model gave non-finite probabilities (NaN or inf); check the checkpoint "
                            "(nmt-validate) and --unkpen / --temperature") from e
