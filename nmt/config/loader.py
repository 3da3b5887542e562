"""Resolving a command's configuration from its layers, in one fixed order.

    dataclass defaults  <  preset (e.g. the --arch function's values)  <  YAML file
                        <  explicit command-line flags  <  trailing key=value overrides

Each layer only holds what it sets, so a later layer never resets an earlier one to a default.
The result is validated against the dataclasses (unknown keys and wrong types are errors) and
every plugin group is completed with that plugin's own defaults.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from nmt.config.compat import MOVED_KEYS
from nmt.config.safe_yaml import VALUE_BYTES, parse_yaml, shortened
from nmt.errors import ConfigError, UsageError
from nmt.fields import as_group, check_values, flag_of, inherited_group
from nmt.fileio import atomic_write_text
from nmt.registry import REGISTRIES, did_you_mean

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Preset = Callable[[DictConfig], "dict[str, Any] | None"]


def leaf_paths(schema: type, prefix: str = "") -> dict[str, dataclasses.Field]:
    """Every dotted config path of ``schema`` -> its field (nested dataclasses flattened)."""
    hints = typing.get_type_hints(schema)
    out: dict[str, dataclasses.Field] = {}
    for f in dataclasses.fields(schema):
        sub = hints[f.name]
        if isinstance(sub, type) and dataclasses.is_dataclass(sub):
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
            elif key in MOVED_KEYS:
                raise ConfigError(f'override "{item}": "{key}" is now {MOVED_KEYS[key]}')
            else:
                hint = did_you_mean(key, list(paths) + list(by_leaf))
                many = f" (ambiguous: {', '.join(by_leaf[key])})" if key in by_leaf else ""
                raise ConfigError(f'override "{item}": no config key "{key}"{many}.{hint} '
                                  "List the keys with --help or see docs/configuration.md")
        try:
            value = parse_yaml(raw, f'override "{shortened(item)}"', VALUE_BYTES) if raw != "" else ""
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


def _plugin_group_fields(schema: type, prefix: str = "") -> dict[str, dataclasses.Field]:
    """Every plugin group of ``schema``: dotted path -> its field."""
    out: dict[str, dataclasses.Field] = {}
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        if dataclasses.is_dataclass(hints[f.name]):
            out.update(_plugin_group_fields(hints[f.name], prefix + f.name + "."))
        elif f.metadata.get("plugin_group"):
            out[prefix + f.name] = f
    return out


def _refuse_interpolation(where: str, value: Any, path: str = "") -> None:
    """omegaconf would resolve ``${...}`` (``${oc.env:X}`` reads the environment): nmt configs hold values."""
    if isinstance(value, str) and "${" in value:
        raise ConfigError(f'{where}: "{path}" is {value!r}: ${{...}} interpolation is not resolved in nmt configs; '
                          "write the value itself")
    if isinstance(value, dict):
        for k, v in value.items():
            _refuse_interpolation(where, v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _refuse_interpolation(where, v, f"{path}[{i}]")


def _shorthand(schema: type, where: str, layer: dict[str, Any]) -> dict[str, Any]:
    """A plugin group given as a bare name (``model.attention=restricted``, ``arch: transformer_tiny``
    in YAML) means ``{"name": ...}``; ``${...}`` is refused."""
    _refuse_interpolation(where, layer)
    layer = copy.deepcopy(layer)  # the caller's dict stays as it was
    for path in _plugin_group_fields(schema):
        *parents, last = path.split(".")
        node: Any = layer
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict) and last in node:
            node[last] = as_group(node[last])
    return layer


def _unknown_key(schema: type, where: str, key: str) -> ConfigError:
    moved = MOVED_KEYS.get(key) or MOVED_KEYS.get(key.rsplit(".", 1)[-1])
    if moved:
        return ConfigError(f'{where}: "{key}" is now {moved}')
    paths = list(leaf_paths(schema))
    leaf = key.rsplit(".", 1)[-1]
    same_leaf = [p for p in paths if p.rsplit(".", 1)[-1] == leaf]  # right name, wrong section
    hint = (f' Did you mean "{same_leaf[0]}"?' if len(same_leaf) == 1 else did_you_mean(key, paths)
            or did_you_mean(leaf, [p.rsplit(".", 1)[-1] for p in paths]))
    return ConfigError(f'{where}: unknown config key "{key}".{hint}')


def _given_group(layer: dict[str, Any], path: str) -> dict[str, Any]:
    """What ``layer`` (in :func:`_shorthand`'s form) sets for the plugin group at ``path``; {} if nothing."""
    node: Any = layer
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _drop_switched_options(schema: type, cfg: DictConfig, layer: dict[str, Any]) -> None:
    """A layer that names another plugin for a group drops, from what the layers below it set there, the
    options the new plugin does not take: they were the old plugin's (``--config run.yaml --attention
    scaled_dot_product`` with the YAML's relative attention and its ``max_relative_position``). Options both
    take carry over, as one flag serves every plugin that has it; an option given beside the new name, in
    the same layer, is still checked. A site's group that inherits the switched one and names no plugin of
    its own loses the old plugin's options too."""
    fields = _plugin_group_fields(schema)
    for path, f in fields.items():
        name = _given_group(layer, path).get("name")
        registry = REGISTRIES[f.metadata["plugin_group"]]
        if name is None or name not in registry:  # an unknown name: the registry's error names it later
            continue
        parent = path.rsplit(".", 1)[0] + "." if "." in path else ""
        inherits = f.metadata.get("inherit")
        previous = _plain_group(cfg, path).get("name")
        if previous is None and inherits:
            previous = _plain_group(cfg, parent + inherits).get("name")
        if previous is None or previous == name:
            continue
        takes = registry.option_names(name) | {"name"}
        sites = [p for p, g in fields.items() if g.metadata.get("inherit") == f.name and p.startswith(parent)
                 and _plain_group(cfg, p).get("name") is None and _given_group(layer, p).get("name") is None]
        for target in [path, *sites]:
            before = _plain_group(cfg, target)
            kept = {k: v for k, v in before.items() if k in takes}
            if kept != before:
                OmegaConf.update(cfg, target, kept, merge=False)


def _merge(schema: type, layers: list[tuple[str, dict[str, Any]]]) -> DictConfig:
    cfg = OmegaConf.structured(schema)
    for where, layer in layers:
        try:
            given = _shorthand(schema, where, layer)
            _drop_switched_options(schema, cfg, given)
            cfg = OmegaConf.merge(cfg, OmegaConf.create(given))
        except ConfigKeyError as e:
            raise _unknown_key(schema, where, str(getattr(e, "full_key", None) or e)) from None
        except ValidationError as e:
            key = getattr(e, "full_key", "?")
            msg = str(e).splitlines()[0]
            raise ConfigError(f'{where}: bad value for "{key}": {msg}') from None
        except OmegaConfBaseException as e:
            raise ConfigError(f"{where}: {str(e).splitlines()[0]}") from None
    return cfg


def _plain_group(cfg: DictConfig, path: str) -> dict[str, Any]:
    """The plugin group at ``path`` as a plain dict, ``${...}`` left as written."""
    # a plugin group's field is a dict in the schema, so omegaconf holds a DictConfig there
    return typing.cast("dict[str, Any]", OmegaConf.to_container(OmegaConf.select(cfg, path), resolve=False))


def _complete_plugin_groups(schema: type, cfg: DictConfig) -> None:
    """Check each plugin group's name and options against its plugin's config class and fill in that
    plugin's defaults. A group that inherits (a site's attention) keeps only what was given for it:
    it is checked as it will be used, merged over the group it inherits from."""
    fields = _plugin_group_fields(schema)
    inheriting = {p: f for p, f in fields.items() if f.metadata.get("inherit")}
    for path, f in sorted(fields.items(), key=lambda pf: pf[0] in inheriting):  # inherited-from groups first
        kind = f.metadata["plugin_group"]
        node = _plain_group(cfg, path)
        shared = None
        if path in inheriting:
            shared = _plain_group(cfg, path.rsplit(".", 1)[0] + "." + f.metadata["inherit"]
                                  if "." in path else f.metadata["inherit"])
        inherits = shared is not None and node.get("name") is None
        effective = node
        if shared is not None and node.get("name") in (None, shared.get("name")):
            effective = inherited_group(node, shared)
        name: Any = effective.get("name")  # as given: the registry's error names a wrong one
        sites = [g.metadata["option_prefix"] for p, g in inheriting.items()
                 if g.metadata["inherit"] == f.name and p.rsplit(".", 1)[0] == path.rsplit(".", 1)[0]]
        _check_option_names(kind, name, effective, f, path, sites)
        options = dataclasses.asdict(REGISTRIES[kind].options(name, effective, flag=flag_of(f), where=path + ".",
                                                               flag_prefix=f.metadata.get("option_prefix", "")))
        if inherits:
            continue  # keep only the options given for it: the rest comes from the group it inherits
        OmegaConf.update(cfg, path, {"name": name, **options}, merge=False)


def _check_option_names(kind: str, name: str, group: dict[str, Any], f: dataclasses.Field, path: str,
                        site_prefixes: list[str]) -> None:
    """An option the chosen plugin does not take: name the plugins that do, and the per-site flags
    (``--attention-window`` given with ``--encoder-attention restricted`` belongs to --attention's plugin)."""
    registry = REGISTRIES[kind]
    known = registry.option_names(name) if name in registry else set()
    for key in sorted(set(group) - known - {"name"}):
        owners = [n for n in registry.choices() if key in registry.option_names(n)]
        if not owners:
            continue  # a plain unknown key: the plugin's own check says so, with the known ones
        flag = "--" + key.replace("_", "-")
        per_site = f"; per site: {', '.join(f'--{s}{flag[2:]}' for s in site_prefixes)}" if site_prefixes else ""
        raise ConfigError(f"{path}: {flag_of(f)} {name} takes no option {key} ({flag}); it is an option of "
                          f"{', '.join(owners)}{per_site}")


def resolve_config(schema: type, *, yaml_file: str | Path | None = None, flags: dict[str, Any] | None = None,
                   overrides: list[str] | tuple[str, ...] = (), preset: Preset | None = None,
                   flags_source: str = "command-line flags") -> DictConfig:
    """Merge the layers (see the module docstring) into one validated config. ``flags_source`` names
    where ``flags`` came from in error messages (e.g. "--eval-bleu-args": options given as JSON)."""
    user_layers = [
        (f"--config {yaml_file}", load_yaml(yaml_file)),
        (flags_source, nested(flags or {})),
        ("key=value overrides", nested(parse_overrides(schema, overrides))),
    ]
    cfg = _merge(schema, user_layers)
    if preset is not None:
        values = preset(cfg)
        if values:
            cfg = _merge(schema, [("preset", values)] + user_layers)
    _complete_plugin_groups(schema, cfg)
    check_values(OmegaConf.to_object(cfg))
    return cfg


def to_yaml(cfg: DictConfig | DataclassInstance) -> str:
    if dataclasses.is_dataclass(cfg):
        cfg = OmegaConf.structured(cfg)
    return OmegaConf.to_yaml(cfg, resolve=False)


def save_config(cfg: DictConfig | DataclassInstance, path: str | Path) -> None:
    """Write the resolved config as YAML (atomically), so a run can be repeated with --config."""
    atomic_write_text(path, to_yaml(cfg))


def to_plain(cfg: DictConfig | DataclassInstance) -> dict[str, Any]:
    """Plain dicts/lists/scalars (safe to store inside a weights_only checkpoint)."""
    if dataclasses.is_dataclass(cfg):
        cfg = OmegaConf.structured(cfg)
    return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]
