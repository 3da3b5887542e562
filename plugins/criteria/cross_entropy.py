"""Plain token-level cross-entropy (negative log-likelihood of the gold tokens)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nmt.registry import register_criterion
from nmt.training.criterion import (
    Criterion,
    CriterionOptions,
    label_smoothed_nll_loss,
    projected_label_smoothed_nll_loss,
)


@dataclass
class CrossEntropyConfig(CriterionOptions):
    """Only the options every criterion takes."""


@register_criterion("cross_entropy", config=CrossEntropyConfig)
class CrossEntropy(Criterion[CrossEntropyConfig]):
    """Cross-entropy of the gold target tokens, padding ignored."""

    def compute(self, logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return label_smoothed_nll_loss(logits, target, 0.0)

    def compute_projected(self, features: torch.Tensor, matrix: torch.Tensor, target: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        return projected_label_smoothed_nll_loss(features, matrix, target, 0.0)
