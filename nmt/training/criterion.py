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
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar, cast

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from nmt.cpu_speed.linear import bucketed_dtype, linear, padded_rows
from nmt.fields import opt
from nmt.registry import CRITERION

LN2 = math.log(2.0)


# Logits processed at once: a chunk's fp32 copy (4 MB) stays in the CPU's last-level cache
# (2^20 elements measured faster than 2^16..2^22).
_CHUNK_ELEMENTS = 1 << 20


def _loss_and_residual(x: torch.Tensor, gold: torch.Tensor, epsilon: float, eps_i: float
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """The summed (loss, nll) of fp32 logits ``x`` (n, V) with gold classes ``gold`` (n, 1); ``x`` is overwritten
    by the loss's gradient with respect to it, ``p - w`` (softmax minus the smoothed target)."""
    v = x.size(-1)
    x_gold = x.gather(-1, gold)  # (n, 1)
    x_sum = x.sum(-1, keepdim=True)  # (n, 1)
    m = x.amax(-1, keepdim=True)  # (n, 1)
    p = x.sub_(m).exp_()  # (n, V) unnormalised softmax, in place
    z = p.sum(-1, keepdim=True)  # (n, 1)
    lse = m + z.log()  # (n, 1) log-sum-exp
    nll = (lse - x_gold).sum()
    # sum_v -log p_v = V * lse - sum_v x_v
    loss = (1.0 - epsilon - eps_i) * nll + eps_i * (v * lse - x_sum).sum() if epsilon else nll
    p.div_(z)  # softmax
    if epsilon:
        p.sub_(eps_i)
    p.scatter_add_(-1, gold, p.new_full(gold.shape, -(1.0 - epsilon - eps_i)))  # p - w
    return loss, nll


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
            chunk_loss, chunk_nll = _loss_and_residual(x, target[start:start + rows].unsqueeze(-1), epsilon, eps_i)
            loss += chunk_loss
            nll += chunk_nll
            grad[start:start + rows] = x  # p - w
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


# Rows of the vocabulary projection that projected_label_smoothed_nll_loss computes at once: about 4M logits
# (428 rows of a 9,816-word vocabulary, 8 MB in bf16). 256 to 512 rows ran equally fast, 128 a quarter
# slower: the products want many rows, the softmax wants them in cache.
_PROJECTION_CHUNK_ELEMENTS = 1 << 22
# The last block is padded to a whole number of quarter blocks: the products then have four shapes in all, and
# oneDNN builds (and keeps, with ~0.7 MB each) a kernel per shape; bucketed row counts gave ~100.
_BLOCK_PARTS = 4


class _ProjectedLabelSmoothedNLL(torch.autograd.Function):
    """The label-smoothed loss of ``features @ weight.T`` with the product done block by block of rows, in
    ``dtype`` (bf16/fp16). A block's logits are turned into their gradient ``p - w`` in place, and that is
    multiplied out into the features' and the weight's gradients at once, so the (N, V) logits and their gradient
    never exist whole (two (N, V) tensors less, and no padded copy of the gradient for the projection's backward).
    The last block is padded with zero rows to a quarter-block multiple; their logits are zero too (no bias),
    which stand as their gradient, so they add nothing. The backward only scales what the forward computed,
    and adds the nll's own term when the nll is back-propagated."""

    @staticmethod
    def forward(ctx: Any, features: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, epsilon: float,
                dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        n, v = features.size(0), weight.size(0)
        eps_i = epsilon / (v - 1)
        w = weight.to(dtype)  # (V, C)
        grad_features = torch.zeros_like(features)  # (N, C)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)  # (V, C), summed over blocks
        loss = features.new_zeros((), dtype=torch.float32)
        nll = features.new_zeros((), dtype=torch.float32)
        part = -(-max(1, _PROJECTION_CHUNK_ELEMENTS // v) // _BLOCK_PARTS)  # a block is _BLOCK_PARTS parts
        block = part * _BLOCK_PARTS
        rows = max(1, _CHUNK_ELEMENTS // v)  # the softmax's chunks, as in _LabelSmoothedNLL
        for start in range(0, n, block):
            m = min(block, n - start)
            x = padded_rows(features[start:start + m], -(-m // part) * part, dtype)  # (b, C), zero below row m
            logits = torch.mm(x, w.t())  # (b, V); zero below row m, which stands as those rows' gradient
            for first in range(0, m, rows):
                last = min(m, first + rows)
                chunk = logits[first:last].to(torch.float32, copy=True)  # (r, V)
                gold = target[start + first:start + last].unsqueeze(-1)  # (r, 1)
                chunk_loss, chunk_nll = _loss_and_residual(chunk, gold, epsilon, eps_i)
                loss += chunk_loss
                nll += chunk_nll
                logits[first:last] = chunk  # p - w, in dtype
            if ctx.needs_input_grad[0]:
                grad_features[start:start + m] = torch.mm(logits, w)[:m]
            if ctx.needs_input_grad[1]:
                grad_weight += torch.mm(logits.t(), x)
        ctx.save_for_backward(grad_features, grad_weight.to(weight.dtype), features, weight, target)
        ctx.epsilon, ctx.eps_i = epsilon, eps_i
        return loss, nll

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_loss: torch.Tensor, grad_nll: torch.Tensor) -> tuple[Any, ...]:
        grad_features, grad_weight, features, weight, target = ctx.saved_tensors
        if bool(grad_nll == 0) and bool(grad_loss == 1):  # the usual case: loss.backward()
            return grad_features, grad_weight, None, None, None
        scale = grad_loss + grad_nll
        grad_features, grad_weight = grad_features * scale, grad_weight * scale
        if bool(grad_nll != 0):  # + g_nll * (w - onehot) @ weight: eps_i off the gold class, -eps on it
            gold = ctx.epsilon + ctx.eps_i
            grad_features += grad_nll * (ctx.eps_i * weight.sum(0) - gold * weight[target])  # (N, C)
            grad_weight += grad_nll * ctx.eps_i * features.sum(0)  # (V, C): every class gets the summed features
            grad_weight.index_add_(0, target, features * (-gold * grad_nll))
        return grad_features, grad_weight, None, None, None


def projected_label_smoothed_nll_loss(features: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                                      epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`label_smoothed_nll_loss` of the logits ``features @ weight.T`` (features (N, C), weight (V, C)).

    Training in bf16/fp16 on the CPU, the product is done in blocks of rows inside the loss
    (:class:`_ProjectedLabelSmoothedNLL`): as fast as projecting then taking the loss, but without the (N, V)
    logits and their gradient, ~0.3 GB less peak memory for the fairseq reference shape's ~4,000 target tokens
    and 9,816 words (docs/training.md), and more with a larger vocabulary. Elsewhere (fp32, CUDA, no gradient) it
    is the plain projection then the loss, as before."""
    dtype = bucketed_dtype(features, weight)
    if dtype is None or not torch.is_grad_enabled() or not (features.requires_grad or weight.requires_grad):
        return label_smoothed_nll_loss(linear(features, weight), target, epsilon)
    return _ProjectedLabelSmoothedNLL.apply(features, weight, target, float(epsilon), dtype)


def _defined_in(cls: type, name: str) -> type:
    """The class of ``cls``'s MRO whose body defines ``name``."""
    return next(c for c in cls.__mro__ if name in vars(c))


def _projects_its_own_compute(cls: type) -> bool:
    """Whether ``cls.compute_projected`` is written for ``cls.compute``: defined in the same class as it or in a
    subclass. A user's subclass of a built-in criterion that overrides only ``compute`` must have it called."""
    return issubclass(_defined_in(cls, "compute_projected"), _defined_in(cls, "compute"))


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside a DistributedDataParallel (or similar ``.module``) wrapper."""
    return getattr(model, "module", model)


@dataclass
class CriterionOptions:
    """The options every criterion takes: a criterion's config dataclass extends this one (the registry refuses
    one that does not; a criterion registered without a config gets these)."""

    sentence_avg: bool = opt(False, "Normalise the loss per sentence instead of per target token.")
    project_all_positions: bool = opt(False, "Project every target position to the vocabulary, padding included "
                                             "(by default only non-pad positions are, when the model allows it).")


CriterionOptionsT = TypeVar("CriterionOptionsT", bound=CriterionOptions)


class Criterion(nn.Module, Generic[CriterionOptionsT]):
    """A loss over a batch. Subclasses implement :meth:`compute` on the non-pad logits; ``cfg`` is the criterion's
    options, a :class:`CriterionOptions` (the type argument: ``Criterion[LabelSmoothedCrossEntropyConfig]``).

    Unless ``cfg.project_all_positions``: when the model offers ``features_only=True`` and
    ``output_layer``, the decoder's features are gathered at the non-pad target positions first and
    only those are projected to the vocabulary (padding costs no (B, T, V) logits). When the model's
    ``output_matrix()`` says that projection is a plain product with one matrix, :meth:`compute_projected`
    gets the features and the matrix instead, so a subclass can do the product inside its loss."""

    # The figures ``forward`` logs, summed over batches and ranks; a subclass may add its own.
    logged_sums: tuple[str, ...] = ("loss", "nll_loss", "ntokens", "nsentences", "sample_size")

    def __init__(self, cfg: CriterionOptionsT, padding_idx: int):
        super().__init__()
        self.cfg = cfg
        self.padding_idx = int(padding_idx)
        self.sentence_avg = cfg.sentence_avg
        self.project_non_pad = not cfg.project_all_positions
        # compute_projected() was written for this class's compute(): else (a user's subclass of a built-in that
        # changes compute() alone) the base's, which calls compute() on the logits
        self.own_compute_projected = _projects_its_own_compute(type(self))

    def non_pad_features(self, model: nn.Module, sample: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(decoder features (N, C), target (N,)) at the N non-pad target positions of ``sample``; the model
        must take ``features_only=True``. The forward goes through ``model``, so DDP's hooks run."""
        target = sample["target"]  # (B, T)
        mask = target.ne(self.padding_idx)  # (B, T)
        features = model(**sample["net_input"], features_only=True)  # (B, T, C)
        features = features[0] if isinstance(features, tuple) else features
        return features[mask], target[mask]

    def non_pad_logits(self, model: nn.Module, sample: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (N, V), target (N,)) at the N non-pad target positions of ``sample``."""
        inner = unwrap(model)
        if self.project_non_pad and hasattr(inner, "output_layer"):
            features, target = self.non_pad_features(model, sample)
            project = cast(Callable[[torch.Tensor], torch.Tensor], inner.output_layer)  # nn.Module cannot type it
            return project(features), target  # (N, V) logits: the projection is a plain call
        target = sample["target"]  # (B, T)
        mask = target.ne(self.padding_idx)  # (B, T)
        out = model(**sample["net_input"])
        return (out[0] if isinstance(out, tuple) else out)[mask], target[mask]  # (N, V), (N,)

    def compute(self, logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Summed (loss, nll_loss) in nats over the non-pad rows."""
        raise NotImplementedError

    def compute_projected(self, features: torch.Tensor, matrix: torch.Tensor, target: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`compute` of the logits ``features @ matrix.T`` (features (N, C), matrix (V, C)). A subclass whose
        loss can do the product itself overrides this (label smoothing: :func:`projected_label_smoothed_nll_loss`)."""
        return self.compute(linear(features, matrix), target)

    def forward(self, model: nn.Module, sample: dict[str, Any]) -> tuple[torch.Tensor, float, dict[str, Any]]:
        output_matrix = getattr(unwrap(model), "output_matrix", None) if self.project_non_pad else None
        matrix = output_matrix() if output_matrix is not None else None  # (V, C), or None: another output layer
        if matrix is not None:
            features, target = self.non_pad_features(model, sample)
            if self.own_compute_projected:
                loss, nll_loss = self.compute_projected(features, matrix, target)
            else:
                loss, nll_loss = Criterion.compute_projected(self, features, matrix, target)
        else:
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


def build_criterion(group: dict[str, Any], padding_idx: int) -> Criterion[Any]:
    """The criterion a plugin group names (``{"name": "label_smoothed_cross_entropy", "label_smoothing": 0.1}``)."""
    return CRITERION.build(group["name"], group, padding_idx)
