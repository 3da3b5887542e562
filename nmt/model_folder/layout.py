"""What a model folder holds and how it is read without trusting it.

A model folder is a data-bin without splits (``metadata.json``, ``dict.LANG.txt``, the BPE codes: every
reader of a data-bin's dictionaries and text pipeline reads it unchanged) plus::

    model.json          the manifest: format version, model config, plugins, dictionary fingerprints,
                        the weights file's size and sha256, tied parameter names, training facts, scores
    model.safetensors   the weights (safetensors: a header and raw tensors, nothing to execute)
    README.md           the model card

The weights are hashed before they are parsed, so a tampered or truncated file is refused in one line.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from nmt.bounded_read import read_bounded, read_json, regular_file
from nmt.checkpoint.errors import CheckpointError

MANIFEST = "model.json"
WEIGHTS = "model.safetensors"
CARD = "README.md"
FOLDER_FORMAT = "nmt-model-folder"
FOLDER_VERSION = 1
MAX_MANIFEST_BYTES = 16 << 20  # a manifest is a few KB
_FIX = "export the model again with nmt-export"


def is_model_folder(path: str | Path | None) -> bool:
    """Whether ``path`` is a folder nmt-export wrote (it holds model.json). A model.json that is not a regular
    file still counts: reading it then says what it is, rather than that the folder is not a model folder."""
    return bool(path) and Path(str(path)).is_dir() and (Path(str(path)) / MANIFEST).exists()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The checked model.json of ``folder``; a damaged, foreign or newer one is one line naming it."""
    path = Path(folder) / MANIFEST
    manifest = read_json(path, MAX_MANIFEST_BYTES, "model manifest", CheckpointError, f"the file is damaged; {_FIX}",
                         missing=f"{folder}: no {MANIFEST}; it is not a model folder written by nmt-export")
    if not isinstance(manifest, dict) or manifest.get("format") != FOLDER_FORMAT:
        raise CheckpointError(f"{path}: not an nmt model manifest (no \"format\": \"{FOLDER_FORMAT}\"); {_FIX}")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise CheckpointError(f"{path}: \"format_version\" must be a positive integer; {_FIX}")
    if version > FOLDER_VERSION:
        raise CheckpointError(f"{path}: model folder format {version} is newer than this nmt reads "
                              f"({FOLDER_VERSION}); upgrade nmt (pip install -U nmt)")
    for key, kind in (("model_config", dict), ("weights", dict), ("dictionaries", dict), ("plugins", list)):
        if not isinstance(manifest.get(key), kind):
            raise CheckpointError(f"{path}: \"{key}\" is missing or of the wrong type; the file is damaged; {_FIX}")
    if not all(isinstance(v, str) for v in manifest["dictionaries"].values()):
        raise CheckpointError(f"{path}: \"dictionaries\" must map source/target to fingerprints; {_FIX}")
    if not isinstance(manifest.get("criterion"), (dict, type(None))):
        raise CheckpointError(f"{path}: \"criterion\" must be a JSON object or null; the file is damaged; {_FIX}")
    if not all(isinstance(r, dict) and isinstance(r.get("kind"), str) and isinstance(r.get("name"), str)
               for r in manifest["plugins"]):
        raise CheckpointError(f"{path}: \"plugins\" must list {{\"kind\", \"name\"}} records; {_FIX}")
    weights = manifest["weights"]
    tied = weights.get("tied", {})
    if not (isinstance(weights.get("sha256"), str) and isinstance(weights.get("bytes"), int)
            and isinstance(tied, dict) and all(isinstance(v, str) for v in tied.values())):
        raise CheckpointError(f"{path}: \"weights\" must give the file's \"bytes\" and \"sha256\"; {_FIX}")
    return manifest


def read_weights(folder: str | Path, manifest: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The model's state_dict from model.safetensors, in float32, after its size and sha256 matched the
    manifest (tied parameters, stored once, are given back under every name)."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    path = Path(folder) / WEIGHTS
    expected = manifest["weights"]
    size = regular_file(path, CheckpointError, _FIX, missing=f"{path}: missing; the model folder is incomplete; {_FIX}"
                        ).st_size
    if size != expected["bytes"]:
        raise CheckpointError(f"{path}: {size} bytes where {MANIFEST} records {expected['bytes']} (truncated or "
                              f"replaced); {_FIX}")
    raw = read_bounded(path, size, "model.safetensors", CheckpointError, _FIX)
    if hashlib.sha256(raw).hexdigest() != expected["sha256"]:
        raise CheckpointError(f"{path}: its content does not match the sha256 in {MANIFEST} (the file was changed "
                              f"or damaged); {_FIX}")
    try:
        stored = load(raw)
    except (SafetensorError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({type(e).__name__}); {_FIX}") from None
    weights = {name: t.float() if t.is_floating_point() else t for name, t in stored.items()}
    for name, first in expected.get("tied", {}).items():
        if first not in weights:
            raise CheckpointError(f"{path}: tied parameter {name} points at {first}, which the file lacks; {_FIX}")
        weights[name] = weights[first]
    return weights


def load_model_folder(folder: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, str]]:
    """(model config, state_dict, dictionary fingerprints) of a model folder, as
    ``nmt.checkpoint.format.load_model_for_inference`` gives them for a checkpoint; its plugins must be
    registered (a --user-dir it needs is named, never imported by itself)."""
    from nmt.checkpoint.verify import check_plugins

    manifest = read_manifest(folder)
    check_plugins({"plugins": manifest["plugins"], "user_dir": manifest.get("user_dir")}, Path(folder) / MANIFEST)
    return manifest["model_config"], read_weights(folder, manifest), dict(manifest["dictionaries"])
