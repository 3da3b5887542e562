"""The Trainer: one update from a list of batches, and validation.

An update runs forward/backward on ``--update-freq`` batches (DDP's all-reduce only on the
last), sums their losses' logged figures over the ranks, divides the gradients once by the total
number of target tokens of the update (all ranks, all batches), clips, checks for overflow, and
steps the optimizer. The result does not depend on how the batches were split over ranks and
accumulation steps. The same all-reduce carries each rank's preemption request, so that every rank
knows after the same update whether to stop (``nmt.training.preemption``), and each rank's training
clock, so that every rank's LR schedule reads the same progress through the budget (``nmt.training.budget``).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from nmt.config.train import TrainJob
from nmt.training import distributed
from nmt.training.budget import Budget
from nmt.training.criterion import Criterion
from nmt.training.distributed import DistributedContext
from nmt.training.ema import WeightAverage
from nmt.training.lr_scheduler import build_lr_scheduler
from nmt.training.optimizer import build_optimizer
from nmt.training.precision import Precision, check_finite_loss

_STOP = "stop_requests"  # rides with the update's figures: how many ranks were asked to stop
_TIME_UP = "time_up"  # and how many ranks' clocks say --stop-time-hours is reached
_CLOCK = "train_seconds"  # and the ranks' training clocks (their mean is every rank's reading)


def move_to(sample: Any, device: torch.device) -> Any:
    """A batch with every tensor on ``device`` (a no-op on the CPU)."""
    if device.type == "cpu":
        return sample
    if isinstance(sample, torch.Tensor):
        return sample.to(device, non_blocking=True)
    if isinstance(sample, dict):
        return {k: move_to(v, device) for k, v in sample.items()}
    if isinstance(sample, (list, tuple)):
        return type(sample)(move_to(v, device) for v in sample)
    return sample


class Trainer:
    """Owns the model, criterion, optimizer, LR schedule and precision of one training run."""

    def __init__(self, cfg: TrainJob, model: torch.nn.Module, criterion: Criterion, ctx: DistributedContext):
        self.cfg = cfg
        self.ctx = ctx
        self.model = model.to(ctx.device)
        self.criterion = criterion.to(ctx.device)
        self.wrapped = distributed.wrap_model(self.model, cfg.distributed_training, ctx)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(cfg.optimizer, self.params, cfg.optimization.lr)
        self.lr_scheduler = build_lr_scheduler(cfg.lr_scheduler, self.optimizer, cfg.optimization.lr,
                                               model_dim=cfg.model.encoder_embed_dim,
                                               max_update=cfg.optimization.max_update)
        self.precision = Precision(cfg.precision, ctx.device, ctx.world_size, cfg.optimization.update_freq)
        self.ema = WeightAverage(self.model, cfg.optimization.ema_decay) if cfg.optimization.ema_decay > 0 else None
        self.num_updates = 0
        self.budget = Budget.of(cfg)
        self.progress = 0.0  # the share of the budget spent, after the last update (what the LR schedule read)
        self.stop_requested: Callable[[], bool] = lambda: False  # read once per update, by every rank
        self.time_is_up: Callable[[], bool] = lambda: False  # likewise; ranks' clocks differ, their vote does not
        self.training_seconds: Callable[[], float] = lambda: 0.0  # this rank's training clock (TrainingClock)

    # ------------------------------------------------------------------ training

    def train_step(self, samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """One update from an update's batches (every rank must pass the same number of them;
        the epoch iterator guarantees it).

        Returns the update's figures summed over batches and ranks, plus gnorm, clipped, lr,
        loss_scale, ``applied`` (False when fp16 skipped an overflowing update), ``stop_requested``
        (some rank was asked to stop: every rank stops after this update) and ``time_up`` (some rank's
        clock reached the time limit: every rank stops after this update, so none waits in a collective
        the others have left)."""
        self.model.train()
        self.criterion.train()
        scale = self.precision.loss_scale
        sums = dict.fromkeys(self.criterion.logged_sums, 0.0)
        for i, sample in enumerate(samples):
            batch = move_to(sample, self.ctx.device)
            with distributed.no_sync(self.wrapped, last=i == len(samples) - 1):
                with self.precision.autocast():
                    loss, _, log = self.criterion(self.wrapped, batch)  # loss: summed over tokens, fp32
                (loss * scale if scale != 1.0 else loss).backward()
            for k in sums:
                sums[k] += float(log.get(k, 0.0))
        totals = self._all_reduce_stats({**sums, _STOP: float(self.stop_requested()),
                                         _TIME_UP: float(self.time_is_up()), _CLOCK: self.training_seconds()})
        stop, time_up = totals.pop(_STOP) > 0, totals.pop(_TIME_UP) > 0
        seconds = totals.pop(_CLOCK) / self.ctx.world_size
        return {**self._step(totals, seconds), "stop_requested": stop, "time_up": time_up}

    def _all_reduce_stats(self, sums: dict[str, float]) -> dict[str, float]:
        """Sum the update's figures over the ranks (one small all-reduce)."""
        if not self.ctx.is_distributed:
            return sums
        keys = list(sums)  # the criterion's logged_sums: the same on every rank
        values = torch.tensor([sums[k] for k in keys], dtype=torch.float64)  # (K,)
        if self.ctx.device.type == "cuda":
            values = values.to(self.ctx.device)
        values = distributed.all_reduce_sum(values).cpu()
        return {k: float(v) for k, v in zip(keys, values.tolist())}

    def _step(self, totals: dict[str, float], seconds: float) -> dict[str, Any]:
        """Normalise, clip, check and apply the accumulated gradients; ``seconds``: the training time so far."""
        if self.precision.scaler is None:
            check_finite_loss(totals["loss"], self.num_updates + 1)
        if self.ctx.is_distributed and not distributed.grads_are_averaged(self.wrapped):
            distributed.all_reduce_grads(self.params)
        grads = [p.grad for p in self.params if p.grad is not None]
        # DDP averaged over ranks: undo that, then divide by the whole update's sample size (and the loss scale).
        ranks = self.ctx.world_size if distributed.grads_are_averaged(self.wrapped) else 1
        sample_size = totals["sample_size"]
        factor = ranks / (sample_size * self.precision.loss_scale) if sample_size > 0 else 0.0
        torch._foreach_mul_(grads, factor)
        gnorm = torch.nn.utils.get_total_norm(grads, foreach=True)
        clip = self.cfg.optimization.clip_norm
        gnorm_value = float(gnorm)
        if clip > 0 and gnorm_value > clip:
            torch.nn.utils.clip_grads_with_norm_(self.params, clip, gnorm, foreach=True)
        loss_scale = self.precision.loss_scale if self.precision.scaler is not None else None
        applied = self.precision.accept_update(gnorm_value, self.num_updates)
        if applied:
            self.optimizer.step()
            self.num_updates += 1
            if self.ema is not None:
                self.ema.update()
            self.progress = self.budget.progress(self.num_updates, seconds)
            self.lr_scheduler.step_update(self.num_updates, self.progress)
        self.optimizer.zero_grad(set_to_none=True)
        return {**totals, "gnorm": gnorm_value, "clipped": clip > 0 and gnorm_value > clip,
                "lr": self.lr_scheduler.get_lr(), "loss_scale": loss_scale, "applied": applied}

    # ------------------------------------------------------------------ validation

    @torch.no_grad()
    def valid_step(self, sample: dict[str, Any]) -> dict[str, float]:
        """Summed figures of one validation batch (no dropout, same precision as training)."""
        self.model.eval()
        self.criterion.eval()
        with self.precision.autocast():
            _, _, log = self.criterion(self.model, move_to(sample, self.ctx.device))
        return {k: float(log.get(k, 0.0)) for k in self.criterion.logged_sums}

    def all_reduce(self, sums: dict[str, float]) -> dict[str, float]:
        """Validation sums over the ranks. A NaN/inf validation loss stops training as diverged (on every
        rank: they all see the same sums) before it reaches the best-checkpoint comparison."""
        totals = self._all_reduce_stats(sums)
        check_finite_loss(totals["loss"], self.num_updates, "validation loss")
        return totals
