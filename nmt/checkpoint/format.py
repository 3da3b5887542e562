"""What a checkpoint file holds, and how it is written and read. No file-naming policy here (that is
:mod:`nmt.checkpoint.manager`'s job).

A checkpoint is one ``torch.save`` zip holding only tensors and plain values (dicts, lists,
numbers, strings), so it is read with ``torch.load(weights_only=True)``: a file with a pickled
callable is refused instead of executed. Layout (``FORMAT_VERSION`` 2, :mod:`nmt.checkpoint.versions`)::

    format_version, nmt_version
    model            the model's state_dict
    model_config     the model's config (plain dict), for generation and averaging
    config           the full resolved config (plain dict)
    plugins          [{"kind", "name", "origin"}]: plugins it was built with
    user_dir         the --user-dir it was trained with (absolute) or None
    dictionaries     {"source": fingerprint, "target": fingerprint}
    training         epoch, num_updates, end_of_epoch, iterator (epoch iterator state),
                     optimizer, lr_scheduler, scaler, rng, rng_ranks, best {metric, value}, extra,
                     and with --ema-decay ema {decay, num_updates, raw_model}

With --ema-decay, ``model`` is the moving average of the weights (what the run validated, and what every reader of
a checkpoint uses) and ``training.ema.raw_model`` the trained weights a resumed run continues from.

``rng`` is the writer's (rank 0's) random generators; ``rng_ranks`` every rank's, in rank order, when
several processes trained (None otherwise), so that each rank of a resumed run draws what it would have.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from nmt.checkpoint.errors import CheckpointError
from nmt.checkpoint.rng_state import get_rng_state
from nmt.checkpoint.safe_read import DamagedFile, damaged, read_file
from nmt.checkpoint.verify import check_plugins, plugin_records
from nmt.checkpoint.versions import FORMAT_VERSION, bring_up_to_date
from nmt.fileio import atomic_write

# --------------------------------------------------------------------------- building the state


def _plain(value: Any, where: str) -> Any:
    """A copy of ``value`` that ``weights_only`` loading accepts (numpy -> python/tensors)."""
    if isinstance(value, np.generic):  # before float: np.float64 is a float subclass that pickles as numpy
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str, bytes, torch.Tensor, torch.dtype,
                                           torch.device, torch.Size)):
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, OrderedDict):  # a state_dict: keep its type and the module versions in _metadata
        out = OrderedDict((k, _plain(v, f"{where}.{k}")) for k, v in value.items())
        if hasattr(value, "_metadata"):
            out._metadata = _plain(value._metadata, f"{where}._metadata")  # type: ignore[attr-defined]
        return out
    if isinstance(value, Mapping):
        return {k: _plain(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    raise CheckpointError(
        f"checkpoint value {where} is a {type(value).__module__}.{type(value).__qualname__}, which a safe "
        "(weights_only) checkpoint cannot hold; make its state_dict() return plain types"
    )


def build_state(*, model: torch.nn.Module, config: Any, epoch: int, num_updates: int,
                optimizer: Any = None, lr_scheduler: Any = None, scaler: Any = None,
                iterator_state: Mapping[str, Any] | None = None, end_of_epoch: bool = False,
                dictionaries: Mapping[str, Any] | None = None, model_config: Any = None,
                best: Mapping[str, Any] | None = None, extra: Mapping[str, Any] | None = None,
                rng_ranks: Sequence[Mapping[str, Any]] | None = None, ema: Any = None) -> dict[str, Any]:
    """Everything a run needs to continue exactly, as plain types. Call it on rank 0 right after an update.

    ``config`` is the resolved config (dataclass, omegaconf or dict); ``model_config`` defaults to its
    ``model`` section; ``dictionaries`` maps a name ("source", "target") to a Dictionary (its
    ``fingerprint()`` is stored) or to a fingerprint string; ``best`` is the best validation so far
    (``{"metric", "value"}``); ``extra`` holds the trainer's own plain values; ``rng_ranks`` every rank's
    :func:`get_rng_state` under several processes; ``ema`` the run's weight average
    (``nmt.training.ema.WeightAverage``), which then becomes the checkpoint's ``model``.
    Tensors are shared with the live model and optimizer: save the state before the next update."""
    from nmt.config.loader import to_plain

    model = getattr(model, "module", model)  # unwrap DistributedDataParallel
    plain_config = _as_plain_config(config, to_plain)
    if model_config is None:
        model_config = plain_config.get("model")
    user_dir = (plain_config.get("common") or {}).get("user_dir")
    weights = model.state_dict()
    training: dict[str, Any] = {
        "epoch": int(epoch),
        "num_updates": int(num_updates),
        "end_of_epoch": bool(end_of_epoch),
        "iterator": dict(iterator_state) if iterator_state is not None else None,
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "lr_scheduler": lr_scheduler.state_dict() if lr_scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "rng": get_rng_state(),
        "rng_ranks": [dict(r) for r in rng_ranks] if rng_ranks is not None else None,
        "best": dict(best) if best is not None else None,
        "extra": dict(extra or {}),
    }
    if ema is not None:
        training["ema"] = {**ema.state_dict(), "raw_model": weights}
    state = {
        "format_version": FORMAT_VERSION,
        "nmt_version": _nmt_version(),
        "model": ema.averaged_state(model) if ema is not None else weights,
        "model_config": _as_plain_config(model_config, to_plain) if model_config is not None else None,
        "config": plain_config,
        "plugins": plugin_records(model, plain_config),
        "user_dir": str(Path(user_dir).expanduser().resolve()) if user_dir else None,
        "dictionaries": {k: d if isinstance(d, str) else d.fingerprint() for k, d in (dictionaries or {}).items()},
        "training": training,
    }
    return _plain(state, "state")


def _nmt_version() -> str:
    try:
        return importlib.metadata.version("nmt")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _as_plain_config(config: Any, to_plain: Any) -> dict[str, Any]:
    if isinstance(config, Mapping) and not hasattr(config, "_metadata"):
        return _plain(dict(config), "config")
    if dataclasses.is_dataclass(config) or hasattr(config, "_metadata"):  # dataclass or omegaconf node
        return to_plain(config)
    raise CheckpointError(f"checkpoint config must be a dataclass, omegaconf node or dict, got {type(config).__name__}")


# --------------------------------------------------------------------------- writing


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a folder be opened
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _link_into_place(src: Path, dst: Path) -> None:
    """Make ``dst`` the same file as ``src`` atomically: hard link (or copy) beside it, then rename."""
    tmp = dst.with_name(f".{dst.name}.link.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        os.link(src, tmp)
    except OSError:  # no hard links here (some network/FAT filesystems): copy instead
        with atomic_write(dst, "wb") as out, open(src, "rb") as f:
            while chunk := f.read(1 << 24):
                out.write(chunk)
        return
    os.replace(tmp, dst)


def save_checkpoint(paths: str | os.PathLike | Sequence[str | os.PathLike], state: Mapping[str, Any]) -> list[Path]:
    """Write ``state`` once, atomically (temp file, fsync, rename) to the first path, then hard-link it to
    the others: a crash at any moment leaves each name holding an old or a new complete checkpoint."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    targets = [Path(p) for p in paths]
    if not targets:
        return []
    if state.get("format_version") is None:
        state = {**state, "format_version": FORMAT_VERSION}
    state = _plain(state, "state")
    with atomic_write(targets[0], "wb") as f:
        torch.save(state, f)
    for dst in targets[1:]:
        _link_into_place(targets[0], dst)
    for folder in {t.parent for t in targets}:
        _fsync_dir(folder)
    return targets


# --------------------------------------------------------------------------- reading


def load_checkpoint(path: str | os.PathLike, *, check_plugins_registered: bool = True) -> dict[str, Any]:
    """Read a checkpoint safely (no code runs) and bring it to the current format; refuse damaged, unsafe
    or newer-format files with one clear line.

    A damaged file's error names the newest good checkpoint beside it. Built-in and installed plugins
    are imported when needed; a ``--user-dir`` must have been loaded before (``nmt.plugin_loader``)."""
    path = Path(path)
    try:
        state = read_file(path)
    except DamagedFile as e:
        raise damaged(e) from None
    state = bring_up_to_date(state, path)
    if check_plugins_registered:
        check_plugins(state, path)
    return state


def load_model_for_inference(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, str]]:
    """(model config, model state_dict, dictionary fingerprints) of a checkpoint, for generation and averaging."""
    return model_parts(load_checkpoint(path))


def model_parts(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, str]]:
    """(model config, model state_dict, dictionary fingerprints) of a loaded checkpoint (``load_checkpoint``)."""
    return stored_model_config(state), state["model"], dict(state.get("dictionaries") or {})


def stored_model_config(state: Mapping[str, Any]) -> dict[str, Any]:
    """The model config a checkpoint's state records (its own key, else the run config's model group)."""
    return state.get("model_config") or (state.get("config") or {}).get("model") or {}
