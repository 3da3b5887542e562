"""Training losses: the base class the ``--criterion`` plugins extend, the shared loss arithmetic,
and the reduction of logged sums into per-token figures in bits.

Contract (docs/architecture.md): ``criterion(model, sample) -> (loss, sample_size, logging_output)``
where ``loss`` is a *sum* over target tokens (the trainer divides by the sample size summed over
ranks and accumulation steps) and ``logging_output`` holds the sums named in ``logged_sums`` (losses
in nats). Those sums are added up over batches and ranks, and :meth:`Criterion.reduce_metrics` turns
them into the figures a log line shows, so a criterion can log a figure of its own.
"""

from __future__ import annotations

import math
from typing import Any, Callable, cast

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from nmt.registry import CRITERION

LN2 = math.log(2.0)


# Logits processed at once: a chunk's fp32 copy (4 MB) stays in the CPU's last-level cache
# (measured on this 2-core EPYC: 2^20 elements beat 2^16..2^22).
_CHUNK_ELEMENTS = 1 << 20


class _LabelSmoothedNLL(torch.autograd.Function):
    """The loss and its gradient in one pass over the logits, chunk by chunk in fp32.

    With ``w`` the smoothed target (gold ``1 - eps``, every other class ``eps_i``; it sums to 1),
    ``loss = -sum_v w_v log p_v`` and its gradient is ``p - w``, known as soon as the softmax is.
    So the forward writes ``p - w`` straight into a buffer of the logits' dtype and the backward
    only scales it: no (N, V) fp32 tensor lives between the passes, and each chunk's softmax is
    computed once, while its rows are in cache. ``nll = lse - x_gold``; its gradient
    ``p - onehot = (p - w) + (w - onehot)`` is added only when the nll itself is back-propagated."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor, epsilon: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
        n, v = logits.shape
        eps_i = epsilon / (v - 1)
        grad = torch.empty_like(logits)  # (N, V) p - w, in the logits' dtype
        loss = logits.new_zeros((), dtype=torch.float32)
        nll = logits.new_zeros((), dtype=torch.float32)
        rows = max(1, _CHUNK_ELEMENTS // v)
        for start in range(0, n, rows):
            x = logits[start:start + rows].to(torch.float32, copy=True)  # (n, V) fp32 copy of the chunk
            gold = target[start:start + rows].unsqueeze(-1)  # (n, 1)
            x_gold = x.gather(-1, gold)  # (n, 1)
            x_sum = x.sum(-1, keepdim=True)  # (n, 1)
            m = x.amax(-1, keepdim=True)  # (n, 1)
            p = x.sub_(m).exp_()  # (n, V) unnormalised softmax, in place
            z = p.sum(-1, keepdim=True)  # (n, 1)
            lse = m + z.log()  # (n, 1) log-sum-exp
            chunk_nll = (lse - x_gold).sum()
            nll += chunk_nll
            # sum_v -log p_v = V * lse - sum_v x_v
            loss += (1.0 - epsilon - eps_i) * chunk_nll + eps_i * (v * lse - x_sum).sum() if epsilon else chunk_nll
            p.div_(z)  # softmax
            if epsilon:
                p.sub_(eps_i)
            p.scatter_add_(-1, gold, p.new_full(gold.shape, -(1.0 - epsilon - eps_i)))  # p - w
            grad[start:start + rows] = p
        ctx.save_for_backward(grad, target)
        ctx.epsilon, ctx.eps_i = epsilon, eps_i
        return loss, nll

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_loss: torch.Tensor, grad_nll: torch.Tensor) -> tuple[Any, None, None]:
        grad, target = ctx.saved_tensors
        if bool(grad_nll == 0) and bool(grad_loss == 1):  # the usual case: loss.backward()
            return grad, None, None
        out = grad * (grad_loss + grad_nll).to(grad.dtype)  # (N, V)
        if bool(grad_nll != 0):  # + g_nll * (w - onehot): eps_i off the gold class, -eps on it
            if ctx.epsilon:
                out.add_((grad_nll * ctx.eps_i).to(out.dtype))
            gold = -(grad_nll * (ctx.epsilon + ctx.eps_i)).to(out.dtype)
            out.scatter_add_(-1, target.unsqueeze(-1), gold.expand(target.size(0), 1).contiguous())
        return out, None, None


def label_smoothed_nll_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed (loss, nll_loss) in nats over the rows of ``logits`` (N, V) with gold ``target`` (N,).

    fairseq's definition: ``loss = (1 - eps - eps_i) * nll + eps_i * sum_v(-log p_v)`` with
    ``eps_i = eps / (V - 1)``, i.e. the gold class gets probability mass ``1 - eps`` and each of the
    other ``V - 1`` classes ``eps / (V - 1)`` (the gold class is not given a share of eps).
    ``eps = 0`` is plain cross-entropy. The rows must already exclude padding. Computed in fp32
    whatever the logits' dtype (e.g. bf16 under autocast); the gradient has the logits' dtype."""
    return _LabelSmoothedNLL.apply(logits, target, float(epsilon))


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside a DistributedDataParallel (or similar ``.module``) wrapper."""
    return getattr(model, "module", model)


class Criterion(nn.Module):
    """A loss over a batch. Subclasses implement :meth:`compute` on the non-pad logits.

    Unless ``cfg.project_all_positions``: when the model offers ``features_only=True`` and
    ``output_layer``, the decoder's features are gathered at the non-pad target positions first and
    only those are projected to the vocabulary (padding costs no (B, T, V) logits)."""

    # The figures ``forward`` logs, summed over batches and ranks; a subclass may add its own.
    logged_sums: tuple[str, ...] = ("loss", "nll_loss", "ntokens", "nsentences", "sample_size")

    def __init__(self, cfg: Any, padding_idx: int):
        super().__init__()
        self.cfg = cfg
        self.padding_idx = int(padding_idx)
        self.sentence_avg = bool(getattr(cfg, "sentence_avg", False))
        self.project_non_pad = not bool(getattr(cfg, "project_all_positions", False))

    def non_pad_logits(self, model: nn.Module, sample: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (N, V), target (N,)) at the N non-pad target positions of ``sample``."""
        target = sample["target"]  # (B, T)
        mask = target.ne(self.padding_idx)  # (B, T)
        net_input = sample["net_input"]
        inner = unwrap(model)
        if self.project_non_pad and hasattr(inner, "output_layer"):
            # The forward goes through ``model`` (DDP's hooks run); the projection is a plain call.
            features = model(**net_input, features_only=True)  # (B, T, C)
            features = features[0] if isinstance(features, tuple) else features
            project = cast(Callable[[torch.Tensor], torch.Tensor], inner.output_layer)  # nn.Module cannot type it
            logits = project(features[mask])  # (N, V)
        else:
            out = model(**net_input)
            logits = (out[0] if isinstance(out, tuple) else out)[mask]  # (N, V)
        return logits, target[mask]

    def compute(self, logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Summed (loss, nll_loss) in nats over the non-pad rows."""
        raise NotImplementedError

    def forward(self, model: nn.Module, sample: dict[str, Any]) -> tuple[torch.Tensor, float, dict[str, Any]]:
        logits, target = self.non_pad_logits(model, sample)
        loss, nll_loss = self.compute(logits, target)
        ntokens = int(sample["ntokens"]) if "ntokens" in sample else int(target.numel())
        nsentences = int(sample.get("nsentences", sample["target"].size(0)))
        sample_size = nsentences if self.sentence_avg else ntokens
        logging_output: dict[str, Any] = {
            "loss": float(loss.detach()),
            "nll_loss": float(nll_loss.detach()),
            "ntokens": ntokens,
            "nsentences": nsentences,
            "sample_size": sample_size,
        }
        return loss, sample_size, logging_output

    def reduce_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        """The figures to log from ``logged_sums`` added up over batches and ranks. A subclass that logs
        more extends the result. See :func:`loss_metrics`."""
        return loss_metrics(sums)


def perplexity(nll_bits: float) -> float:
    """``2 ** nll_bits``; inf past a float's range (a diverging loss) instead of an OverflowError."""
    return math.inf if nll_bits >= 1024 else 2.0 ** nll_bits


def loss_metrics(sums: dict[str, float]) -> dict[str, float]:
    """fairseq's figures from summed logging outputs: ``loss`` per sample-size unit and ``nll_loss`` per
    target token, both in bits (base 2), and ``ppl = 2**nll_loss``."""
    ntokens, sample_size = float(sums.get("ntokens", 0)), float(sums.get("sample_size", 0))
    loss = float(sums.get("loss", 0)) / sample_size / LN2 if sample_size else 0.0
    nll_loss = float(sums.get("nll_loss", 0)) / ntokens / LN2 if ntokens else 0.0
    return {"loss": loss, "nll_loss": nll_loss, "ppl": perplexity(nll_loss)}


def build_criterion(group: dict[str, Any], padding_idx: int) -> Criterion:
    """The criterion a plugin group names (``{"name": "label_smoothed_cross_entropy", "label_smoothing": 0.1}``)."""
    return CRITERION.build(group["name"], group, padding_idx)
