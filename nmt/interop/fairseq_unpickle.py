"""Reading a fairseq ``.pt`` without running pickled code.

fairseq pickles its ``args`` (an ``argparse.Namespace``) and, in some versions, its ``cfg`` (an
omegaconf ``DictConfig``) into every checkpoint, so ``torch.load(weights_only=True)`` refuses the
file as it is. Instead of unrestricted unpickling we allow exactly the classes those objects are
made of (listed in :data:`ALLOWED_GLOBALS`, each one checked against a real checkpoint) and refuse
anything else before a single object is built, naming the global.
"""

from __future__ import annotations

import argparse
import collections
import pickle
import typing
import zipfile
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, ListConfig
from omegaconf.base import ContainerMetadata, Metadata
from omegaconf.nodes import AnyNode, BooleanNode, FloatNode, IntegerNode, StringNode

from nmt.errors import DataError

# The classes a fairseq 0.12 checkpoint is made of besides tensors and plain containers.
ALLOWED_GLOBALS: list[Any] = [
    argparse.Namespace,  # args (every fairseq version; the only one in cfg["model"] of 0.12)
    DictConfig, ListConfig, ContainerMetadata, Metadata,  # cfg pickled as omegaconf (before to_container)
    AnyNode, StringNode, IntegerNode, FloatNode, BooleanNode,  # the leaf nodes of such a cfg
    typing.Any, collections.defaultdict,  # referenced by omegaconf's metadata
    dict, list, int, float, str, bool,  # key/element types named in omegaconf's metadata
]
ALLOWED_NAMES = frozenset(f"{g.__module__}.{g.__qualname__}" for g in ALLOWED_GLOBALS)


class UnsafeCheckpointError(DataError):
    """A fairseq file holds a pickled global that is not on the allow-list."""


def _refuse(path: Path, name: str) -> UnsafeCheckpointError:
    return UnsafeCheckpointError(
        f"fairseq checkpoint {path} is refused: it holds the pickled global {name}, which is not on the "
        "allow-list of classes a fairseq checkpoint needs (docs/fairseq.md); it could run code, so it is not loaded")


def load_fairseq_file(path: str | Path) -> dict[str, Any]:
    """The checkpoint's top-level dict (``args``, ``cfg``, ``model``, ...), loaded on the CPU.

    Unknown globals are found by scanning the pickle (nothing is built) and refused by name;
    the load itself is ``weights_only`` with only :data:`ALLOWED_GLOBALS` added."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"--path {path}: no such file; give a fairseq checkpoint (e.g. checkpoint_best.pt)")
    if zipfile.is_zipfile(path):  # every checkpoint torch >= 1.6 wrote; older ones are checked by the load
        for name in torch.serialization.get_unsafe_globals_in_checkpoint(path):
            if name not in ALLOWED_NAMES:
                raise _refuse(path, name)
    try:
        with torch.serialization.safe_globals(ALLOWED_GLOBALS):
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        detail = next((line for line in str(e).splitlines() if "GLOBAL" in line), "")
        name = detail.split("GLOBAL", 1)[1].split()[0] if "GLOBAL" in detail else "(unknown)"
        if "weights only" in str(e).lower() or "GLOBAL" in str(e):
            raise _refuse(path, name) from None
        raise DataError(f"fairseq checkpoint {path} cannot be read: {str(e).splitlines()[0]}") from None
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:160]
        raise DataError(f"fairseq checkpoint {path} is truncated or not a torch file ({first})") from None
    if not isinstance(state, dict) or "model" not in state:
        raise DataError(f"fairseq checkpoint {path} has no 'model' entry; give a checkpoint written by fairseq-train")
    return state


def fairseq_model_args(state: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """The model's options as a plain dict: ``cfg["model"]`` (0.10+) or ``args`` (older), either a
    Namespace, a DictConfig or a dict. ``${...}`` interpolations stay text: resolving them would read
    the environment (``${oc.env:X}``) from a file's say-so."""
    cfg = state.get("cfg")
    if isinstance(cfg, DictConfig):
        from omegaconf import OmegaConf

        cfg = OmegaConf.to_container(cfg, resolve=False)
    source = cfg.get("model") if isinstance(cfg, dict) else None
    if source is None:
        source = state.get("args")
    if isinstance(source, argparse.Namespace):
        return dict(vars(source))
    if isinstance(source, DictConfig):
        from omegaconf import OmegaConf

        return dict(OmegaConf.to_container(source, resolve=False))  # type: ignore[arg-type]
    if isinstance(source, dict):
        return dict(source)
    raise DataError(f"fairseq checkpoint {path} holds neither cfg['model'] nor args; cannot tell its architecture")
