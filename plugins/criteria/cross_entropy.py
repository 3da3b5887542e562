"""Plain token-level cross-entropy (negative log-likelihood of the gold tokens)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nmt.fields import opt
from nmt.registry import register_criterion
from nmt.training.criterion import Criterion, label_smoothed_nll_loss, projected_label_smoothed_nll_loss


@dataclass
class CrossEntropyConfig:
    sentence_avg: bool = opt(False, "Normalise the loss per sentence instead of per target token.")
    project_all_positions: bool = opt(False, "Project every target position to the vocabulary, padding included "
                                             "(by default only non-pad positions are, when the model allows it).")


@register_criterion("cross_entropy", config=CrossEntropyConfig)
class CrossEntropy(Criterion):
    """Cross-entropy of the gold target tokens, padding ignored."""

    def compute(self, logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return label_smoothed_nll_loss(logits, target, 0.0)

    def compute_projected(self, features: torch.Tensor, matrix: torch.Tensor, target: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        return projected_label_smoothed_nll_loss(features, matrix, target, 0.0)
