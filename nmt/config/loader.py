"""Resolving a command's configuration from its layers, in one fixed order.

    dataclass defaults  <  preset (e.g. the --arch function's values)  <  YAML file
                        <  explicit command-line flags  <  trailing key=value overrides

Each layer only holds what it sets, so a later layer never resets an earlier one to a default.
The result is validated against the dataclasses (unknown keys and wrong types are errors) and
every plugin group is completed with that plugin's own defaults.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, Callable

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from nmt.config.safe_yaml import VALUE_BYTES, parse_yaml
from nmt.errors import ConfigError, UsageError
from nmt.fileio import atomic_write_text
from nmt.registry import REGISTRIES, did_you_mean, to_dataclass

Preset = Callable[[DictConfig], "dict[str, Any] | None"]


def leaf_paths(schema: type, prefix: str = "") -> dict[str, dataclasses.Field]:
    """Every dotted config path of ``schema`` -> its field (nested dataclasses flattened)."""
    hints = typing.get_type_hints(schema)
    out: dict[str, dataclasses.Field] = {}
    for f in dataclasses.fields(schema):
        sub = hints[f.name]
        if dataclasses.is_dataclass(sub):
            out.update(leaf_paths(sub, prefix + f.name + "."))
        else:
            out[prefix + f.name] = f
    return out


def nested(dotted: dict[str, Any]) -> dict[str, Any]:
    """{"a.b": 1} -> {"a": {"b": 1}}."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        node = out
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def parse_overrides(schema: type, overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["optimization.lr=0.001", "seed=3"]`` -> dotted dict. A bare leaf name is accepted
    when it is unique in the schema (``lr=0.001``); values are read as YAML scalars."""
    paths = leaf_paths(schema)
    by_leaf: dict[str, list[str]] = {}
    for p in paths:
        by_leaf.setdefault(p.rsplit(".", 1)[-1], []).append(p)
    out: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise UsageError(f'override "{item}" is not of the form key=value (e.g. optimization.lr=0.001)')
        key, raw = item.split("=", 1)
        key = key.strip().lstrip("+")
        head = key.split(".")[0]
        if key not in paths and not any(p.startswith(head + ".") or p == head for p in paths):
            if len(by_leaf.get(key, [])) == 1:
                key = by_leaf[key][0]
            else:
                hint = did_you_mean(key, list(paths) + list(by_leaf))
                many = f" (ambiguous: {', '.join(by_leaf[key])})" if key in by_leaf else ""
                raise ConfigError(f'override "{item}": no config key "{key}"{many}.{hint} '
                                  "List the keys with --help or see docs/configuration.md")
        try:
            value = parse_yaml(raw, f'override "{item}"', VALUE_BYTES) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        out[key] = value
    return out


def load_yaml(path: str | Path | None) -> dict[str, Any]:
    if not path:
        return {}
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--config {path}: no such file; give a YAML file (see docs/configuration.md)")
    try:
        data = parse_yaml(path.read_text(encoding="utf-8"), f"--config {path}")
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"--config {path}: not valid YAML: {first}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: the top level must be a mapping of config keys")
    return data


def _merge(schema: type, layers: list[tuple[str, dict[str, Any]]]) -> DictConfig:
    cfg = OmegaConf.structured(schema)
    for where, layer in layers:
        try:
            cfg = OmegaConf.merge(cfg, OmegaConf.create(layer))
        except ConfigKeyError as e:
            key = getattr(e, "full_key", None) or str(e)
            paths = list(leaf_paths(schema))
            leaf = str(key).rsplit(".", 1)[-1]
            same_leaf = [p for p in paths if p.rsplit(".", 1)[-1] == leaf]  # right name, wrong section
            hint = (f' Did you mean "{same_leaf[0]}"?' if len(same_leaf) == 1 else did_you_mean(str(key), paths)
                    or did_you_mean(leaf, [p.rsplit(".", 1)[-1] for p in paths]))
            raise ConfigError(f'{where}: unknown config key "{key}".{hint}') from None
        except ValidationError as e:
            key = getattr(e, "full_key", "?")
            msg = str(e).splitlines()[0]
            raise ConfigError(f'{where}: bad value for "{key}": {msg}') from None
        except OmegaConfBaseException as e:
            raise ConfigError(f"{where}: {str(e).splitlines()[0]}") from None
    return cfg


def _complete_plugin_groups(schema: type, cfg: DictConfig, prefix: str = "") -> None:
    """Validate each plugin group's options against its plugin's config class; fill defaults."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        kind = f.metadata.get("plugin_group")
        if dataclasses.is_dataclass(hints[f.name]):
            _complete_plugin_groups(hints[f.name], cfg[f.name], prefix + f.name + ".")
        elif kind:
            node = OmegaConf.to_container(cfg[f.name], resolve=True)
            name = node.pop("name", None)
            registry = REGISTRIES[kind]
            entry = registry.entry(name)
            options: dict[str, Any] = {}
            if entry.config is not None:
                try:
                    options = dataclasses.asdict(to_dataclass(entry.config, node))
                except ConfigError as e:
                    raise ConfigError(f'{prefix}{f.name} "{name}": {e}') from None
            elif node:
                raise ConfigError(f'{kind} "{name}" takes no options, but got: {", ".join(sorted(node))}')
            cfg[f.name] = {"name": name, **options}


def resolve_config(schema: type, *, yaml_file: str | Path | None = None, flags: dict[str, Any] | None = None,
                   overrides: list[str] | tuple[str, ...] = (), preset: Preset | None = None) -> DictConfig:
    """Merge the layers (see the module docstring) into one validated config."""
    user_layers = [
        (f"--config {yaml_file}", load_yaml(yaml_file)),
        ("command-line flags", nested(flags or {})),
        ("key=value overrides", nested(parse_overrides(schema, overrides))),
    ]
    cfg = _merge(schema, user_layers)
    if preset is not None:
        values = preset(cfg)
        if values:
            cfg = _merge(schema, [("preset", values)] + user_layers)
    _complete_plugin_groups(schema, cfg)
    return cfg


def to_yaml(cfg: Any) -> str:
    if dataclasses.is_dataclass(cfg):
        cfg = OmegaConf.structured(cfg)
    return OmegaConf.to_yaml(cfg, resolve=True)


def save_config(cfg: Any, path: str | Path) -> None:
    """Write the resolved config as YAML (atomically), so a run can be repeated with --config."""
    atomic_write_text(path, to_yaml(cfg))


def to_plain(cfg: Any) -> dict[str, Any]:
    """Plain dicts/lists/scalars (safe to store inside a weights_only checkpoint)."""
    if dataclasses.is_dataclass(cfg):
        cfg = OmegaConf.structured(cfg)
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
