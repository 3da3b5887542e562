"""Command-line flags generated from the config dataclasses.

A flag is another way to write a config key: ``--max-tokens 4096`` is ``dataset.max_tokens=4096``.
Flags default to "not given" so that only what the user typed overrides the lower layers.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

import click
import yaml

from nmt.config.safe_yaml import VALUE_BYTES, parse_yaml
from nmt.errors import ConfigError
from nmt.fields import allowed_text, flag_of
from nmt.registry import REGISTRIES


@dataclass
class FlagSpec:
    """One generated flag and the config path it writes."""

    flag: str
    path: str
    type: Any  # click type, or "bool"
    help: str
    group: str
    is_plugin_name: bool = False
    plugins: tuple[str, ...] = ()  # for a plugin option: the plugins that declare it
    bare: Any = None  # the value of the flag given without one (None: a value is required)


def _click_type(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin is typing.Union:  # Optional[X]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _click_type(args[0]) if len(args) == 1 else click.STRING
    if tp is bool:
        return "bool"
    if tp is int:
        return click.INT
    if tp is float:
        return click.FLOAT
    if tp is str:
        return click.STRING
    return YamlValue()  # lists, dicts, Any: read the text as YAML


class YamlValue(click.ParamType):
    name = "yaml"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return parse_yaml(value, param.opts[0] if param is not None else "a flag value", VALUE_BYTES)
        except yaml.YAMLError:
            return value


def _default_text(f: dataclasses.Field) -> str:
    allowed = allowed_text(f)
    text = f" ({allowed})" if allowed and not f.metadata.get("choices") else ""
    if f.metadata.get("choices"):
        text += f" Choices: {', '.join(str(c) for c in f.metadata['choices'])}."
    if f.default is not dataclasses.MISSING and f.default is not None:
        text += f" [default: {f.default}]"
    return text


def flag_specs(schema: type) -> list[FlagSpec]:
    """The flags of a command: its config fields, plus the options of every registered plugin
    of each plugin group (so ``--adam-betas`` exists once the adam plugin is registered; a site's
    group prefixes them: ``--encoder-attention-window``)."""
    specs: dict[str, FlagSpec] = {}
    hints_cache: dict[type, dict[str, Any]] = {}

    def hints(cls: type) -> dict[str, Any]:
        if cls not in hints_cache:
            hints_cache[cls] = typing.get_type_hints(cls)
        return hints_cache[cls]

    def add(spec: FlagSpec) -> None:
        old = specs.get(spec.flag)
        if old is not None and old.path != spec.path:
            where = ", ".join(old.plugins + spec.plugins) or "the config"
            raise ConfigError(f"flag {spec.flag} would set both {old.path} and {spec.path} ({where}); rename the "
                              "plugin option")
        if old is None:
            specs[spec.flag] = spec
        else:
            old.plugins += spec.plugins

    def walk(cls: type, prefix: str, section: str) -> None:
        for f in dataclasses.fields(cls):
            tp = hints(cls)[f.name]
            if isinstance(tp, type) and dataclasses.is_dataclass(tp):
                walk(tp, prefix + f.name + ".", f.metadata.get("group") or f.name.replace("_", " "))
                continue
            if not f.metadata.get("cli", True):
                continue
            group = f.metadata.get("group") or section
            kind = f.metadata.get("plugin_group")
            if kind:
                plugin_flags(f, kind, prefix + f.name, group)
                continue
            add(FlagSpec(flag_of(f), prefix + f.name, _click_type(tp), f.metadata.get("help", "") + _default_text(f),
                         group, bare=f.metadata.get("bare")))

    def plugin_flags(f: dataclasses.Field, kind: str, path: str, group: str) -> None:
        registry = REGISTRIES[kind]
        assert callable(f.default_factory)  # a plugin group's default is made by a factory (fields.plugin_group)
        default = f.default_factory()["name"]
        inherit = str(f.metadata.get("inherit")).replace("_", "-")
        shown = default if default is not None else f"as --{inherit}, with its options"
        helptext = f"{f.metadata.get('help', '')} Choices: {', '.join(registry.choices())}. [default: {shown}]"
        add(FlagSpec(flag_of(f), path + ".name", click.STRING, helptext, group, True))
        option_prefix = f.metadata.get("option_prefix", "")
        for name in registry.choices():
            pcls = registry.config_class(name)
            for pf in dataclasses.fields(pcls):
                pflag = "--" + option_prefix + flag_of(pf)[2:]
                phelp = f"{pf.metadata.get('help', '')}{_default_text(pf)}"
                add(FlagSpec(pflag, f"{path}.{pf.name}", _click_type(hints(pcls)[pf.name]), phelp, group,
                             plugins=(f"{kind} {name}",)))

    walk(schema, "", "options")
    for spec in specs.values():
        if spec.plugins:
            kind = spec.plugins[0].split()[0]
            names = ", ".join(p.split(" ", 1)[1] for p in spec.plugins)
            spec.help = f"({kind} {names}) {spec.help}"
    return list(specs.values())


def click_options(specs: list[FlagSpec]) -> list[click.Option]:
    out = []
    for s in specs:
        param = s.path.replace(".", "__")
        if s.type == "bool":
            out.append(click.Option([s.flag, param], is_flag=True, default=None, help=s.help))
        elif s.bare is not None:  # the value may be left out: the flag alone gives ``bare``
            out.append(click.Option([s.flag, param], type=s.type, default=None, is_flag=False, flag_value=s.bare,
                                    help=s.help))
        else:
            out.append(click.Option([s.flag, param], type=s.type, default=None, help=s.help))
        out[-1].nmt_group = s.group  # type: ignore[attr-defined]
    return out


def flags_given(kwargs: dict[str, Any], specs: list[FlagSpec]) -> dict[str, Any]:
    """The dotted config values of the flags the user actually gave."""
    out = {}
    for s in specs:
        value = kwargs.get(s.path.replace(".", "__"))
        if value is not None:
            out[s.path] = value
    return out


class GroupedCommand(click.Command):
    """A click command whose --help lists options in sections (one per config group)."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            group = getattr(param, "nmt_group", "general")
            sections.setdefault(group, []).append(record)
        for group, records in sections.items():
            with formatter.section(group.capitalize()):
                formatter.write_dl(records)
