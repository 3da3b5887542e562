"""Checkpoint averaging: the element-wise mean of several checkpoints' parameters, written as an
ordinary checkpoint (nmt-generate loads it like any other).

Only checkpoints of one model can be averaged: the same architecture (model config, dropout
aside), the same parameter names and shapes, and the same dictionaries. Sums are kept in fp32
(fp64 for fp64 tensors) so that low-precision weights lose nothing while being added.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Sequence

import torch

from nmt.checkpoint.errors import CheckpointError
from nmt.checkpoint.format import load_checkpoint, save_checkpoint
from nmt.checkpoint.manager import PROGRESS_RE
from nmt.errors import UsageError

EPOCH_NAME = re.compile(r"checkpoint(\d+)\.pt")
UPDATE_NAME = re.compile(r"checkpoint_(\d+)_(\d+)\.pt")
PROGRESS_NAME = PROGRESS_RE  # nmt-train --save-at-progress
COUNT_FLAGS = "--num-epoch-checkpoints N, --num-update-checkpoints N or --num-progress-checkpoints N"


def last_checkpoints(folder: str | Path, num_epoch: int | None = None, num_update: int | None = None,
                     num_progress: int | None = None) -> list[Path]:
    """The newest ``num_epoch`` checkpointEPOCH.pt (or ``num_update`` checkpoint_E_U.pt, or ``num_progress``
    checkpoint_progress_P.pt) files, oldest first."""
    folder = Path(folder)
    given = [(n, pattern, flag) for n, pattern, flag in ((num_epoch, EPOCH_NAME, "--num-epoch-checkpoints"),
                                                          (num_update, UPDATE_NAME, "--num-update-checkpoints"),
                                                          (num_progress, PROGRESS_NAME, "--num-progress-checkpoints"))
             if n is not None]
    if len(given) != 1:
        raise UsageError(f"give exactly one of {COUNT_FLAGS} with a folder in --inputs")
    if not folder.is_dir():
        raise UsageError(f"--inputs {folder}: no such folder")
    count, pattern, flag = given[0]
    if count < 1:
        raise UsageError(f"{flag} {count}: must be at least 1")
    found: list[tuple[float, Path]] = []
    for path in folder.iterdir():
        m = pattern.fullmatch(path.name)
        if m:
            found.append((float(m.groups()[-1]), path))
    if len(found) < count:
        raise UsageError(f"{flag} {count}: {folder} holds only {len(found)} such checkpoints "
                         f"({', '.join(sorted(p.name for _, p in found)) or 'none'})")
    found.sort()
    return [p for _, p in found[-count:]]


def _architecture(state: dict[str, Any]) -> dict[str, Any]:
    cfg = state.get("model_config") or (state.get("config") or {}).get("model") or {}
    return {k: v for k, v in cfg.items() if "dropout" not in k}


def _check_same_model(first: dict[str, Any], first_path: Path, state: dict[str, Any], path: Path) -> None:
    a, b = _architecture(first), _architecture(state)
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            raise CheckpointError(f"cannot average {path} with {first_path}: different architectures "
                                  f"({key} = {b.get(key)!r} vs {a.get(key)!r}); average checkpoints of one run")
    da, db = first.get("dictionaries") or {}, state.get("dictionaries") or {}
    for key in sorted(set(da) | set(db)):
        if da.get(key) != db.get(key):
            raise CheckpointError(f"cannot average {path} with {first_path}: their {key} dictionaries differ; "
                                  "average checkpoints trained on the same data-bin")
    pa, pb = first["model"], state["model"]
    if set(pa) != set(pb):
        diff = sorted(set(pa) ^ set(pb))
        raise CheckpointError(f"cannot average {path} with {first_path}: different parameters ({diff[0]}, ...)")
    for name, tensor in pa.items():
        if tensor.shape != pb[name].shape:
            raise CheckpointError(f"cannot average {path} with {first_path}: parameter {name} has shape "
                                  f"{tuple(pb[name].shape)} vs {tuple(tensor.shape)}")


def tied_names(weights: dict[str, torch.Tensor]) -> dict[str, str]:
    """name -> the first name holding the same tensor (tied embeddings are stored once per name)."""
    first_of: dict[tuple, str] = {}
    return {name: first_of.setdefault((t.data_ptr(), tuple(t.shape), t.stride(), t.dtype), name)
            for name, t in weights.items()}


def average_checkpoints(paths: Sequence[str | Path]) -> dict[str, Any]:
    """The state of the last checkpoint with its model replaced by the mean of all of them.

    The optimizer and scheduler state are dropped (they belong to one point of training); the
    sources are recorded in ``training.extra.averaged_from``."""
    files = [Path(p) for p in paths]
    if not files:
        raise UsageError("--inputs: no checkpoints to average")
    first = load_checkpoint(files[0])
    canonical = tied_names(first["model"])
    sums: dict[str, torch.Tensor] = {}
    for name in set(canonical.values()):
        t = first["model"][name]
        dtype = torch.float64 if t.dtype == torch.float64 else torch.float32 if t.is_floating_point() else t.dtype
        sums[name] = t.to(dtype, copy=True)  # a copy: tied tensors share storage in the loaded state
    last = first
    for path in files[1:]:
        state = load_checkpoint(path)
        _check_same_model(first, files[0], state, path)
        for name, total in sums.items():
            t = state["model"][name]
            if t.is_floating_point():
                total += t.to(total.dtype)
            else:
                sums[name] = t.clone()  # integer buffers (counters): the newest value
        last = state
    n = len(files)
    means = {name: (s / n).to(first["model"][name].dtype) if s.is_floating_point() else s
             for name, s in sums.items()}
    averaged = {name: means[canonical[name]] for name in first["model"]}  # tied names share one tensor again
    training = dict(last.get("training") or {})
    for key in ("optimizer", "lr_scheduler", "scaler", "iterator", "ema"):
        training[key] = None
    training["extra"] = {**(training.get("extra") or {}), "averaged_from": [str(p) for p in files]}
    return {**last, "model": averaged, "training": training}


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same path, or links (hard or symbolic) to one inode."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): not the same file
        return False


def check_output(paths: Sequence[str | Path], output: str | Path) -> None:
    """Refuse an ``--output`` that is a folder or one of the inputs (writing it would replace that input)."""
    out = Path(output)
    if out.is_dir():
        raise UsageError(f"--output {out} is a folder; give the file to write, e.g. {out / 'averaged.pt'}")
    for path in paths:
        if _same_file(out, Path(path)):
            same = "" if str(path) == str(out) else f" (the same file as input {path})"
            raise UsageError(f"--output {out} is one of the --inputs{same}; writing it would replace that "
                             "checkpoint: give a new file name")


def write_average(paths: Sequence[str | Path], output: str | Path) -> Path:
    """Average ``paths`` and save the result (atomically) to ``output``, which must not be an input."""
    check_output(paths, output)
    state = average_checkpoints(paths)
    save_checkpoint(output, state)
    return Path(output)
