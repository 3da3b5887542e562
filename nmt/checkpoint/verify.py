"""What a checkpoint needs from the run that loads it: its plugins registered, the same dictionaries,
and a model with the same parameters. Each check fails in one line that says what differs and the fix."""

from __future__ import annotations

import os
from typing import Any, Mapping

import torch

from nmt.checkpoint.errors import CheckpointError
from nmt.errors import ConfigError
from nmt.plugin_loader import load_plugins
from nmt.registry import REGISTRIES

_USER_DIR_MODULE = "nmt_user_dir_"  # prefix nmt.plugin_loader gives --user-dir packages


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


def _shape(t: Any) -> str:
    return "(" + ", ".join(str(n) for n in t.shape) + ")" if isinstance(t, torch.Tensor) else type(t).__name__


def parameter_mismatch(expected: Mapping[str, Any], stored: Mapping[str, Any]) -> str | None:
    """What differs between a model's state_dict (``expected``) and a checkpoint's tensors (``stored``),
    in a few words (None when every name and shape agrees): the first parameter whose shape differs,
    then the counts of missing and unexpected names with the first of each."""
    missing = [k for k in expected if k not in stored]
    unexpected = [k for k in stored if k not in expected]
    parts = []
    for name, tensor in expected.items():
        if name in stored and (not isinstance(stored[name], torch.Tensor) or stored[name].shape != tensor.shape):
            parts.append(f"parameter {name} is {_shape(stored[name])} in the checkpoint but {_shape(tensor)} in "
                         "the model")
            break
    if missing:
        parts.append(f"{len(missing)} parameters of the model are missing from it (first: {missing[0]})")
    if unexpected:
        parts.append(f"{len(unexpected)} of its tensors have no place in the model (first: {unexpected[0]})")
    return "; ".join(parts) or None


def check_finite_weights(weights: Mapping[str, torch.Tensor], source: str) -> None:
    """Refuse stored parameters holding NaN or inf (a diverged run's checkpoint): such a model would
    translate nothing and score nan. One ``isfinite`` pass over the tensors, before a model is built."""
    for name, tensor in weights.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(f"{source}: parameter {name} is not finite ({bad} of its {tensor.numel()} values "
                                  "are NaN or inf); the training diverged before it was saved; use an earlier "
                                  "checkpoint")
