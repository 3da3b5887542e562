"""Cross-entropy against a label-smoothed target (the paper's regulariser, eps = 0.1)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nmt.fields import opt
from nmt.registry import register_criterion
from nmt.training.criterion import (
    Criterion,
    CriterionOptions,
    label_smoothed_nll_loss,
    projected_label_smoothed_nll_loss,
)


@dataclass
class LabelSmoothedCrossEntropyConfig(CriterionOptions):
    label_smoothing: float = opt(0.1, "Probability mass taken from the gold token and spread evenly over the "
                                      "other V-1 vocabulary entries (fairseq's definition; 0 = plain cross-entropy).",
                                  low=0, high=1, high_open=True)


@register_criterion("label_smoothed_cross_entropy", config=LabelSmoothedCrossEntropyConfig)
class LabelSmoothedCrossEntropy(Criterion[LabelSmoothedCrossEntropyConfig]):
    """Cross-entropy with label smoothing; the logged nll_loss is the unsmoothed one."""

    def __init__(self, cfg: LabelSmoothedCrossEntropyConfig, padding_idx: int):
        super().__init__(cfg, padding_idx)
        self.eps = float(cfg.label_smoothing)

    def compute(self, logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return label_smoothed_nll_loss(logits, target, self.eps)

    def compute_projected(self, features: torch.Tensor, matrix: torch.Tensor, target: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        return projected_label_smoothed_nll_loss(features, matrix, target, self.eps)
