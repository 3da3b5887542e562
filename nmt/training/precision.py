"""Mixed precision: the autocast context and fp16's dynamic loss scaler.

The parameters and the optimizer state stay fp32 ("master weights"); only the forward pass
runs in bf16/fp16 under autocast. bf16 has fp32's exponent range, so it needs no loss scaling.
fp16 does: the loss is multiplied by a scale before backward so that small gradients do not
flush to zero; an update whose gradients overflow is skipped and the scale lowered.
"""

from __future__ import annotations

import contextlib
import math
from typing import ContextManager

import torch

from nmt.config.train import PrecisionConfig
from nmt.errors import ConfigError, NmtError


class TrainingDiverged(NmtError):
    """The loss or the gradients became NaN/inf (or fp16's loss scale hit its floor)."""


_DIVERGED = "training diverged. Lower --lr, raise --warmup-updates, or set --clip-norm"


class DynamicLossScaler:
    """fp16's loss scale: halved on an overflowing update, doubled after ``scale_window``
    updates in a row without one. Below ``min_loss_scale`` training is declared diverged."""

    def __init__(self, init_scale: float = 128.0, scale_window: int = 2000, scale_factor: float = 2.0,
                 tolerance: float = 0.0, floor: float | None = None, min_loss_scale: float = 1e-4):
        self.loss_scale = float(init_scale)
        self.scale_window = max(1, int(scale_window))
        self.scale_factor = scale_factor
        self.tolerance = tolerance
        self.floor = floor
        self.min_loss_scale = min_loss_scale
        self._iter = 0  # updates seen, overflowing ones included
        self._last_overflow_iter = -1
        self._last_rescale_iter = -1
        self._overflows_since_rescale = 0

    def update(self, grads_finite: bool, num_updates: int) -> bool:
        """Record one update's outcome; True when its optimizer step may be applied."""
        if grads_finite:
            if (self._iter - self._last_overflow_iter) % self.scale_window == 0:
                self.loss_scale *= self.scale_factor
                self._last_rescale_iter = self._iter
            self._iter += 1
            return True
        previous = self.loss_scale
        self._last_overflow_iter = self._iter
        self._overflows_since_rescale += 1
        since_rescale = max(1, self._iter - self._last_rescale_iter)
        if self._overflows_since_rescale / since_rescale >= self.tolerance:
            self.loss_scale /= self.scale_factor
            if self.floor is not None:
                self.loss_scale = max(self.loss_scale, self.floor)
            self._last_rescale_iter = self._iter
            self._overflows_since_rescale = 0
        self._iter += 1
        if self.loss_scale <= self.min_loss_scale:
            self.loss_scale = previous
            raise TrainingDiverged(
                f"update {num_updates + 1}: fp16 loss scale fell below --min-loss-scale {self.min_loss_scale} "
                "(the gradients keep overflowing); lower --lr, use --bf16, or train in fp32")
        return False

    def state_dict(self) -> dict:
        return {"loss_scale": self.loss_scale, "iter": self._iter, "last_overflow_iter": self._last_overflow_iter,
                "last_rescale_iter": self._last_rescale_iter,
                "overflows_since_rescale": self._overflows_since_rescale}

    def load_state_dict(self, state: dict) -> None:
        self.loss_scale = float(state["loss_scale"])
        self._iter = int(state["iter"])
        self._last_overflow_iter = int(state["last_overflow_iter"])
        self._last_rescale_iter = int(state["last_rescale_iter"])
        self._overflows_since_rescale = int(state["overflows_since_rescale"])


def fp16_available(device: torch.device) -> bool:
    """Whether --fp16 can run here: float16 autocast is CUDA-only (tests replace this to exercise the
    loss scaler on the CPU, where the model then runs in fp32)."""
    return device.type == "cuda"


class Precision:
    """The compute dtype of one run: its autocast context and, for fp16, its loss scaler."""

    def __init__(self, cfg: PrecisionConfig, device: torch.device, world_size: int = 1, update_freq: int = 1):
        if cfg.fp16 and cfg.bf16:
            raise ConfigError("--fp16 and --bf16 were both given; choose one")
        if cfg.fp16 and not fp16_available(device):
            raise ConfigError("--fp16 needs a CUDA GPU (float16 autocast is CUDA-only here); "
                              "on the CPU use --bf16 instead")
        self.device = device
        self.dtype: torch.dtype | None = torch.bfloat16 if cfg.bf16 else torch.float16 if cfg.fp16 else None
        self.autocast_enabled = self.dtype is not None and not (cfg.fp16 and device.type != "cuda")
        self.scaler: DynamicLossScaler | None = None
        if cfg.fp16:
            window = cfg.fp16_scale_window or max(1, 2**14 // world_size // update_freq)
            self.scaler = DynamicLossScaler(cfg.fp16_init_scale, window, tolerance=cfg.fp16_scale_tolerance,
                                            floor=cfg.threshold_loss_scale, min_loss_scale=cfg.min_loss_scale)

    @property
    def name(self) -> str:
        return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(self.dtype, "fp32")  # type: ignore[arg-type]

    @property
    def loss_scale(self) -> float:
        """What the summed loss is multiplied by before backward (1 without fp16)."""
        return self.scaler.loss_scale if self.scaler is not None else 1.0

    def autocast(self) -> ContextManager:
        """The context the forward pass (model and criterion) runs in."""
        if not self.autocast_enabled:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def accept_update(self, grad_norm: float, num_updates: int) -> bool:
        """Whether the update with this (unscaled) gradient norm may be applied.

        fp16: an overflow skips the update and lowers the scale. fp32/bf16: a NaN/inf
        gradient means training diverged, which stops it with the update's number."""
        finite = math.isfinite(grad_norm)
        if self.scaler is not None:
            return self.scaler.update(finite, num_updates)
        if not finite:
            raise TrainingDiverged(f"update {num_updates + 1}: the gradient norm is {grad_norm} ({self.name}); "
                                   f"{_DIVERGED}")
        return True

    def state_dict(self) -> dict:
        return {"scaler": self.scaler.state_dict()} if self.scaler is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])


def check_finite_loss(loss: float, update: int, what: str = "training loss") -> None:
    """Stop with a clear message when a summed loss is NaN/inf: going on would only write checkpoints
    and log lines of a broken model. ``update`` is the update the loss belongs to."""
    if not math.isfinite(loss):
        raise TrainingDiverged(f"update {update}: the {what} is {loss}; {_DIVERGED}")
