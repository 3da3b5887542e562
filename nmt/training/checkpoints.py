"""Checkpoints that resume a run exactly and can never run code.

A checkpoint is one ``torch.save`` zip holding only tensors and plain values (dicts, lists,
numbers, strings), so it is read with ``torch.load(weights_only=True)``: a file with a pickled
callable is refused instead of executed. Layout (``FORMAT_VERSION`` 1)::

    format_version, nmt_version
    model            the model's state_dict
    model_config     the model's config (plain dict), for generation and averaging
    config           the full resolved config (plain dict)
    plugins          [{"kind", "name", "origin"}]: plugins it was built with
    user_dir         the --user-dir it was trained with (absolute) or None
    dictionaries     {"source": fingerprint, "target": fingerprint}
    training         epoch, num_updates, end_of_epoch, iterator (epoch iterator state),
                     optimizer, lr_scheduler, scaler, rng, best {metric, value}, extra

Which file names are written, and when, is :class:`nmt.training.checkpoint_manager.CheckpointManager`'s job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import os
import pickle
import re
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import torch

from nmt.errors import ConfigError, DataError
from nmt.fileio import atomic_write
from nmt.plugin_loader import load_plugins
from nmt.registry import REGISTRIES
from nmt.training.rng_state import get_rng_state, set_rng_state

FORMAT_VERSION = 2
_USER_DIR_MODULE = "nmt_user_dir_"  # prefix nmt.plugin_loader gives --user-dir packages


class CheckpointError(DataError):
    """A checkpoint file is missing, damaged, unsafe or from an incompatible nmt."""


class _DamagedFile(CheckpointError):
    """Raised by :func:`_read`; :func:`load_checkpoint` turns it into a message naming a good checkpoint."""

    def __init__(self, path: Path, why: str):
        super().__init__(f"checkpoint {path} is truncated or corrupted ({why})")
        self.path, self.why = path, why


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


def plugin_records(model: Any, config: Mapping[str, Any]) -> list[dict[str, str]]:
    """The plugins a run uses: ``model.plugin_names()`` (role -> name) plus every plugin choice in the config
    (``{"optimizer": {"name": "adam", ...}}``, ``arch: "transformer"``), each with the origin it was registered from."""
    found: list[tuple[str, str]] = []

    def kind_of(role: str) -> str | None:
        if role in REGISTRIES:
            return role
        matches = [k for k in REGISTRIES if role.endswith(k) or role.startswith(k)]
        return max(matches, key=len) if matches else None

    def walk(node: Any) -> None:
        if not isinstance(node, Mapping):
            return
        for key, value in node.items():
            if key in REGISTRIES and isinstance(value, str):
                found.append((key, value))
            elif key in REGISTRIES and isinstance(value, Mapping) and isinstance(value.get("name"), str):
                found.append((key, value["name"]))
            walk(value)

    names = getattr(model, "plugin_names", None)
    for role, name in (names() if callable(names) else {}).items():
        kind = kind_of(str(role))
        if kind is not None and isinstance(name, str):
            found.append((kind, name))
    walk(config)
    records, seen = [], set()
    for kind, name in found:
        if (kind, name) in seen:
            continue
        seen.add((kind, name))
        origin = REGISTRIES[kind].entry(name).origin if name in REGISTRIES[kind] else "?"
        records.append({"kind": kind, "name": name, "origin": origin})
    return records


def build_state(*, model: torch.nn.Module, config: Any, epoch: int, num_updates: int,
                optimizer: Any = None, lr_scheduler: Any = None, scaler: Any = None,
                iterator_state: Mapping[str, Any] | None = None, end_of_epoch: bool = False,
                dictionaries: Mapping[str, Any] | None = None, model_config: Any = None,
                extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Everything a run needs to continue exactly, as plain types. Call it on rank 0 right after an update.

    ``config`` is the resolved config (dataclass, omegaconf or dict); ``model_config`` defaults to its
    ``model`` section; ``dictionaries`` maps a name ("source", "target") to a Dictionary (its
    ``fingerprint()`` is stored) or to a fingerprint string; ``extra`` holds the trainer's own plain values.
    Tensors are shared with the live model and optimizer: save the state before the next update."""
    from nmt.config.loader import to_plain

    model = getattr(model, "module", model)  # unwrap DistributedDataParallel
    plain_config = _as_plain_config(config, to_plain)
    if model_config is None:
        model_config = plain_config.get("model")
    user_dir = (plain_config.get("common") or {}).get("user_dir")
    state = {
        "format_version": FORMAT_VERSION,
        "nmt_version": _nmt_version(),
        "model": model.state_dict(),
        "model_config": _as_plain_config(model_config, to_plain) if model_config is not None else None,
        "config": plain_config,
        "plugins": plugin_records(model, plain_config),
        "user_dir": str(Path(user_dir).expanduser().resolve()) if user_dir else None,
        "dictionaries": {k: d if isinstance(d, str) else d.fingerprint() for k, d in (dictionaries or {}).items()},
        "training": {
            "epoch": int(epoch),
            "num_updates": int(num_updates),
            "end_of_epoch": bool(end_of_epoch),
            "iterator": dict(iterator_state) if iterator_state is not None else None,
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
            "lr_scheduler": lr_scheduler.state_dict() if lr_scheduler is not None else None,
            "scaler": scaler.state_dict() if scaler is not None else None,
            "rng": get_rng_state(),
            "best": None,  # filled in by CheckpointManager.save
            "extra": dict(extra or {}),
        },
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


def restore_training_state(state: Mapping[str, Any], *, model: torch.nn.Module, optimizer: Any = None,
                           lr_scheduler: Any = None, scaler: Any = None, restore_rng: bool = True) -> dict[str, Any]:
    """Load ``state`` into the live objects; returns ``state["training"]`` (epoch, num_updates, iterator, extra, best).

    Call it after everything has been built (building draws random numbers): the RNG states are set
    last, so the next random number is the one the interrupted run would have drawn."""
    model = getattr(model, "module", model)
    model.load_state_dict(state["model"])
    training = state["training"]
    for name, obj in (("optimizer", optimizer), ("lr_scheduler", lr_scheduler), ("scaler", scaler)):
        if obj is not None and training.get(name) is not None:
            obj.load_state_dict(training[name])
    if restore_rng and training.get("rng") is not None:
        set_rng_state(training["rng"])
    return training


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


def _checkpoint_order(path: Path) -> tuple[int, int, float]:
    """Sort key, newest last: (epoch, updates) parsed from the name, then the modification time."""
    m = re.fullmatch(r"checkpoint_?(\d+)(?:_(\d+))?\.pt", path.name)
    epoch, updates = (int(m.group(1)), int(m.group(2) or 1 << 62)) if m else (-1, -1)
    with contextlib.suppress(OSError):
        return epoch, updates, path.stat().st_mtime
    return epoch, updates, 0.0


def previous_good_checkpoint(folder: str | os.PathLike, exclude: Iterable[str | os.PathLike] = ()) -> Path | None:
    """The newest checkpoint*.pt in ``folder`` that reads back whole (other than ``exclude`` and its hard links)."""
    folder = Path(folder)
    excluded = [Path(p) for p in exclude]
    candidates = sorted((p for p in folder.glob("checkpoint*.pt") if p.is_file()), key=_checkpoint_order, reverse=True)
    for path in candidates:
        if any(path == e or (e.exists() and os.path.samefile(path, e)) for e in excluded):
            continue
        try:
            _read(path)
        except CheckpointError:
            continue
        return path
    return None


def _damaged(path: Path, why: str) -> CheckpointError:
    good = previous_good_checkpoint(path.parent, exclude=[path])
    fix = (f"the previous good checkpoint is {good}: resume from it with --restore-file {good}" if good
           else f"no other good checkpoint is in {path.parent}; delete {path.name} to start afresh")
    return CheckpointError(f"checkpoint {path} is truncated or corrupted ({why}); {fix}")


def _read(path: Path) -> dict[str, Any]:
    """torch.load(weights_only=True) with every failure turned into one clear CheckpointError."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path}: no such file; check the path (or --save-dir / --restore-file)")
    try:  # a whole-file CRC check first: torch does not notice a flipped byte in tensor data
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise _DamagedFile(path, f"not a complete zip: {e}") from None
    if bad is not None:
        raise _DamagedFile(path, f"bad CRC in member {bad}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        detail = next((line.strip() for line in str(e).splitlines() if "GLOBAL" in line or "Unsupported" in line), "")
        if "weights only" in str(e).lower():
            raise CheckpointError(
                f"checkpoint {path} is refused: it holds pickled objects or code that a safe load will not run "
                f"({detail or 'not plain data'}); nmt checkpoints hold only tensors and plain values"
            ) from None
        raise _DamagedFile(path, str(e).splitlines()[0]) from None
    except (RuntimeError, EOFError, KeyError, ValueError, OSError, zipfile.BadZipFile) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:160]
        raise _DamagedFile(path, f"{type(e).__name__}: {first}") from None
    if not isinstance(state, dict) or "format_version" not in state:
        raise CheckpointError(f"checkpoint {path} is not an nmt checkpoint (no format_version); "
                              "give a checkpoint written by nmt-train")
    return state


def check_format(state: Mapping[str, Any], path: str | os.PathLike) -> None:
    version = state.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {path} has format version {version}, newer than this nmt reads "
                              f"({FORMAT_VERSION}); upgrade nmt (pip install -U nmt) to load it")


def check_plugins(state: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Fail, naming the plugin and where it came from, when one the checkpoint needs is not registered."""
    user_dir = state.get("user_dir")
    records = [r for r in state.get("plugins") or [] if r.get("kind") in REGISTRIES]
    if any(r.get("name") not in REGISTRIES[r["kind"]] for r in records):
        load_plugins()  # built-ins and installed packages are always available: import them first
    for record in records:
        kind, name, origin = record["kind"], record.get("name"), record.get("origin", "?")
        if name in REGISTRIES[kind]:
            continue
        if user_dir and str(origin).startswith(_USER_DIR_MODULE):
            fix = f"it came from --user-dir {user_dir}: pass --user-dir {user_dir}"
        else:
            where = f"it was registered by {origin}" if origin != "?" else "its origin was not recorded"
            fix = (f"{where}; the run used --user-dir {user_dir}: pass it, or install that plugin" if user_dir
                   else f"{where}; install the package that provides it (or pass the --user-dir that holds it)")
        raise ConfigError(f'checkpoint {path} was built with {kind} plugin "{name}", which is not registered; {fix}')


def check_dictionaries(state: Mapping[str, Any], path: str | os.PathLike, dictionaries: Mapping[str, Any]) -> None:
    """Fail when a dictionary differs from the one the checkpoint was trained with (ids would mean other words)."""
    stored = state.get("dictionaries") or {}
    for key, d in dictionaries.items():
        now = d if isinstance(d, str) else d.fingerprint()
        if key in stored and stored[key] != now:
            raise CheckpointError(f"checkpoint {path} was trained with another {key} dictionary (fingerprint "
                                  f"{stored[key][:12]}, now {now[:12]}); use the data-bin it was trained on")


def load_checkpoint(path: str | os.PathLike, *, check_plugins_registered: bool = True) -> dict[str, Any]:
    """Read a checkpoint safely (no code runs); refuse damaged, unsafe or newer-format files with one clear line.

    A damaged file's error names the newest good checkpoint beside it. Built-in and installed plugins
    are imported when needed; a ``--user-dir`` must have been loaded before (``nmt.plugin_loader``)."""
    path = Path(path)
    try:
        state = _read(path)
    except _DamagedFile as e:
        raise _damaged(path, e.why) from None
    check_format(state, path)
    if state["format_version"] == 1:
        from nmt.config.compat import upgrade_config_v1, upgrade_model_config_v1

        state["config"] = upgrade_config_v1(state.get("config") or {})
        if state.get("model_config"):
            state["model_config"] = upgrade_model_config_v1(state["model_config"])
        state["format_version"] = 2
    if check_plugins_registered:
        check_plugins(state, path)
    return state


def load_model_for_inference(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, str]]:
    """(model config, model state_dict, dictionary fingerprints) of a checkpoint, for generation and averaging."""
    state = load_checkpoint(path)
    model_config = state.get("model_config") or (state.get("config") or {}).get("model") or {}
    return model_config, state["model"], dict(state.get("dictionaries") or {})


def __getattr__(name: str) -> Any:
    """``from nmt.training.checkpoints import CheckpointManager`` works (it lives in its own module)."""
    if name == "CheckpointManager":
        from nmt.training.checkpoint_manager import CheckpointManager

        return CheckpointManager
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "FORMAT_VERSION", "CheckpointError", "CheckpointManager", "build_state", "restore_training_state",
    "save_checkpoint", "load_checkpoint", "load_model_for_inference", "previous_good_checkpoint",
    "check_plugins", "check_dictionaries", "check_format", "plugin_records",
]
