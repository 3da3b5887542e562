"""Every random generator's state as plain types, so that a resumed run draws the same numbers.

The states go inside checkpoints, which are loaded with ``torch.load(weights_only=True)``: only
dicts, lists, tuples, numbers, strings and tensors may appear, never a numpy array or a
generator object. So numpy's key array becomes a list of ints and python's state a list.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def get_rng_state() -> dict[str, Any]:
    """The states of python's, numpy's, torch's CPU and (when present) every CUDA generator."""
    version, key, gauss_next = random.getstate()
    np_state = np.random.get_state(legacy=True)
    assert isinstance(np_state, tuple)  # the global RandomState is MT19937, whose legacy state is a 5-tuple
    np_kind, np_key, np_pos, np_has_gauss, np_gauss = np_state
    state: dict[str, Any] = {
        "python": {"version": version, "key": list(key), "gauss_next": gauss_next},
        "numpy": {"kind": str(np_kind), "key": np_key.tolist(), "pos": int(np_pos),
                  "has_gauss": int(np_has_gauss), "cached_gaussian": float(np_gauss)},
        "torch": torch.get_rng_state(),  # (5056,) uint8
        "cuda": [],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back what :func:`get_rng_state` returned (CUDA only when this machine has the same devices)."""
    py = state["python"]
    random.setstate((py["version"], tuple(py["key"]), py["gauss_next"]))
    npy = state["numpy"]
    np.random.set_state((npy["kind"], np.asarray(npy["key"], dtype=np.uint32), npy["pos"],
                         npy["has_gauss"], npy["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
        torch.cuda.set_rng_state_all(cuda)
