"""Field helpers for the config dataclasses, and the check of the values they declare.

Every config value is declared once, in a dataclass, with its default, help text and what it may
be (``choices``, or a range with ``low`` / ``high``). The command-line flags are generated from these
declarations (``nmt.config.cli_options``) and :func:`check_values` enforces them on every config,
whether its values came from flags, YAML, ``key=value`` or a checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

from nmt.errors import ConfigError


def opt(default: Any = dataclasses.MISSING, help: str = "", *, flag: str | None = None,
        choices: list[Any] | None = None, low: float | None = None, high: float | None = None,
        low_open: bool = False, high_open: bool = False, cli: bool = True,
        default_factory: Any = dataclasses.MISSING, group: str | None = None, bare: Any = None) -> Any:
    """A config field with its help text and its allowed values.

    ``choices`` lists the allowed values; ``low`` / ``high`` bound a number (inclusive, or
    exclusive with ``low_open`` / ``high_open``); a float must also be finite. None
    is always allowed for an Optional field. ``flag`` overrides the generated flag name
    (``--field-name``); ``cli=False`` keeps a field off the command line (YAML / ``key=value``
    only); ``group`` names the ``--help`` section; ``bare`` is the value of the flag given without one
    (``--constraints`` alone is ``--constraints unordered``)."""
    metadata = {"help": help, "flag": flag, "choices": choices, "low": low, "high": high,
                "low_open": low_open, "high_open": high_open, "cli": cli, "group": group, "bare": bare}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def plugin_group(registry: str, default_name: Optional[str], help: str, flag: str | None = None,
                 group: str | None = None, inherit: str | None = None, option_prefix: str = "") -> Any:
    """A config field holding a plugin choice and that plugin's own options: ``{"name": ..., ...}``.

    ``registry`` is the registry's kind (``"optimizer"``). The plugin's options are validated against
    its config dataclass when the config is resolved. A group with ``inherit`` (the name of a sibling
    group of the same kind, e.g. ``"attention"``) may leave its name None: it then uses that group's
    plugin and options, its own options overriding them. ``option_prefix`` is put before the
    plugin's option flags (``--encoder-`` + ``attention-window``)."""
    return dataclasses.field(
        default_factory=lambda: {"name": default_name},
        metadata={"help": help, "flag": flag, "plugin_group": registry, "cli": True, "group": group,
                  "inherit": inherit, "option_prefix": option_prefix},
    )


def flag_of(f: dataclasses.Field) -> str:
    """The command-line flag of a field."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _number(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def allowed_text(f: dataclasses.Field) -> str | None:
    """What a field allows, for messages and --help ("one of a, b", "in [0, 1)"), or None."""
    m = f.metadata
    if m.get("choices"):
        return "one of " + ", ".join(str(c) for c in m["choices"])
    low, high = m.get("low"), m.get("high")
    if high is None:
        return None if low is None else f"{'>' if m.get('low_open') else '>='} {_number(low)}"
    if low is None:
        return f"{'<' if m.get('high_open') else '<='} {_number(high)}"
    return (f"in {'(' if m.get('low_open') else '['}{_number(low)}, {_number(high)}"
            f"{')' if m.get('high_open') else ']'}")


def value_error(f: dataclasses.Field, value: Any) -> str | None:
    """Why ``value`` is not allowed for field ``f``, or None when it is."""
    m = f.metadata
    if value is None:
        return None
    if m.get("choices") and value not in m["choices"]:
        return allowed_text(f)
    if isinstance(value, float) and not math.isfinite(value):  # NaN or inf is never a meaningful setting
        return "must be a finite number" + (f" {allowed_text(f)}" if allowed_text(f) else "")
    low, high = m.get("low"), m.get("high")
    if low is None and high is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    too_low = low is not None and (value <= low if m.get("low_open") else value < low)
    too_high = high is not None and (value >= high if m.get("high_open") else value > high)
    return f"must be {allowed_text(f)}" if too_low or too_high else None


def check_values(obj: Any, where: str = "", flag_prefix: str = "") -> None:
    """Enforce the declared choices and ranges of every field of dataclass instance ``obj``
    (nested dataclasses included). ``where`` is the config path of ``obj`` ("model."), ``flag_prefix``
    what its fields' flags start with after "--" (a site's plugin options: "decoder-")."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_values(value, f"{where}{f.name}.")
            continue
        why = value_error(f, value)
        if why is not None:
            flag = "--" + flag_prefix + flag_of(f)[2:]
            shown = f"{flag} {value!r}" if f.metadata.get("cli", True) else f"{where}{f.name}={value!r}"
            if not why.startswith("must"):
                why = f"choose {why}"
            raise ConfigError(f"{shown}: {why} ({where}{f.name})")


def as_group(value: Any) -> Any:
    """A plugin group given as a bare name (``attention: restricted``) means ``{"name": "restricted"}``."""
    return {"name": value} if value is None or isinstance(value, str) else value


def inherited_group(own: Mapping[str, Any], shared: Mapping[str, Any]) -> dict[str, Any]:
    """The plugin and options of a group declared with ``inherit``: its own when it names another
    plugin; otherwise the shared group's, overlaid with its own options."""
    own = dict(own)
    name = own.pop("name", None)
    if name is None or name == shared.get("name"):
        return {**shared, **own}
    return {"name": name, **own}


def literal(value: Any) -> Any:
    """``value`` with every ``${...}`` in its strings escaped, so omegaconf keeps it as text:
    interpolation is never resolved on config values (they may come from a file or a checkpoint,
    and ``${oc.env:X}`` would read the environment)."""
    if isinstance(value, str):
        return value.replace("${", "\\${")
    if isinstance(value, Mapping):
        return {k: literal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [literal(v) for v in value]
    return value


def to_dataclass(cls: type, value: Any, where: str = "", flag_prefix: str = "") -> Any:
    """Dataclass ``cls`` filled from ``value`` (None, a dict, an omegaconf node or an instance): unknown
    keys, wrong types and values outside the declared choices or ranges are ConfigErrors (``where`` and
    ``flag_prefix``: see :func:`check_values`)."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if value is None:
        value = {}
    if isinstance(value, cls):
        check_values(value, where, flag_prefix)
        return value
    if isinstance(value, DictConfig):
        value = OmegaConf.to_container(value, resolve=False)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - names - {"name"})
    if unknown:
        known = ", ".join(sorted(names)) or "none"
        raise ConfigError(f"{where.rstrip('.') or cls.__name__}: unknown option(s) {', '.join(unknown)}; "
                          f"known: {known}")
    groups = {f.name for f in dataclasses.fields(cls) if f.metadata.get("plugin_group")}
    kept = {k: as_group(v) if k in groups else v for k, v in value.items() if k in names}
    try:
        schema = OmegaConf.structured(cls)
    except OmegaConfBaseException:  # a field type omegaconf cannot check: take the values as given
        out = cls(**kept)
    else:
        try:  # typed merge: "1e-9" from a key=value override becomes a float, "abc" is refused
            out = OmegaConf.to_object(OmegaConf.merge(schema, literal(kept)))
        except OmegaConfBaseException as e:
            raise ConfigError(f"{where.rstrip('.') or cls.__name__}: {str(e).splitlines()[0]}") from None
    check_values(out, where, flag_prefix)
    return out
