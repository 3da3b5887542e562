"""--ema-decay: an exponential moving average of the weights, the model a run validates and saves.

After every applied update each floating-point entry of the model's state (parameters and buffers) moves
``ema += (1 - d) * (weight - ema)``, with ``d = min(--ema-decay, (1 + k) / (10 + k))`` at the k-th update, so
the random initial weights are forgotten within the first updates whatever the decay. The average is kept
in fp32 whatever the precision of training (bf16 would round small steps away); tied weights share one average.

With it on, validation (the loss, ``--eval-bleu``, hence checkpoint_best.pt) runs on the average, and a
checkpoint's ``model`` is the average: nmt-generate, nmt-validate, nmt-export and nmt-average-checkpoints use it
as they use any checkpoint. The trained weights, which training continues from, are kept beside it in the
checkpoint (``training.ema.raw_model``).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from typing import Any, Iterator, Mapping

import torch


def _storage_key(t: torch.Tensor) -> tuple[int, tuple[int, ...], tuple[int, ...], torch.dtype]:
    return t.data_ptr(), tuple(t.shape), t.stride(), t.dtype


class WeightAverage:
    """The moving average of ``model``'s floating-point weights (see the module doc)."""

    def __init__(self, model: torch.nn.Module, decay: float):
        self.decay = float(decay)
        self.num_updates = 0
        # name -> the live tensor; tied names map to one tensor, averaged once
        self._live: dict[str, torch.Tensor] = {}
        self._first_name: dict[str, str] = {}  # name -> the first name of its storage
        seen: dict[Any, str] = {}
        for name, t in model.state_dict(keep_vars=True).items():
            if not t.is_floating_point():
                continue
            first = seen.setdefault(_storage_key(t), name)
            self._first_name[name] = first
            if first == name:
                self._live[name] = t
        self.shadow = {name: self._fp32(t) for name, t in self._live.items()}

    @staticmethod
    def _fp32(t: torch.Tensor) -> torch.Tensor:
        dtype = torch.float64 if t.dtype == torch.float64 else torch.float32
        return t.detach().to(dtype=dtype, copy=True)

    @torch.no_grad()
    def update(self) -> None:
        """Move the average towards the weights after an applied update."""
        self.num_updates += 1
        k = self.num_updates
        decay = min(self.decay, (1.0 + k) / (10.0 + k))
        names = list(self._live)
        shadows = [self.shadow[n] for n in names]
        weights = [self._live[n].detach().to(self.shadow[n].dtype) for n in names]
        torch._foreach_lerp_(shadows, weights, 1.0 - decay)

    def averaged_state(self, model: torch.nn.Module) -> OrderedDict[str, torch.Tensor]:
        """``model.state_dict()`` with the average in place of every floating-point entry (in each entry's own
        dtype; tied names share one tensor again)."""
        state = model.state_dict()
        cast: dict[str, torch.Tensor] = {}
        out: OrderedDict[str, torch.Tensor] = OrderedDict()
        for name, t in state.items():
            first = self._first_name.get(name)
            if first is None:
                out[name] = t
                continue
            if first not in cast:
                cast[first] = self.shadow[first].to(t.dtype)
            out[name] = cast[first]
        return out

    @contextlib.contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The model holds the average inside (for validation), its trained weights again after."""
        with torch.no_grad():
            saved = {n: t.detach().clone() for n, t in self._live.items()}
            for n, t in self._live.items():
                t.copy_(self.shadow[n])
        try:
            yield
        finally:
            with torch.no_grad():
                for n, t in self._live.items():
                    t.copy_(saved[n])

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps besides the average itself (which is its ``model``)."""
        return {"decay": self.decay, "num_updates": self.num_updates}

    def load(self, state: Mapping[str, Any] | None, averaged: Mapping[str, torch.Tensor] | None) -> None:
        """Continue the average of a checkpoint (``averaged``: its ``model``); None for either starts the
        average from the current weights (the checkpoint had none)."""
        if state is None or averaged is None:
            self.num_updates = 0
            self.shadow = {name: self._fp32(t) for name, t in self._live.items()}
            return
        self.num_updates = int(state.get("num_updates", 0))
        self.shadow = {name: averaged[name].detach().to(self.shadow[name].dtype, copy=True) for name in self._live}
