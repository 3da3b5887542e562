"""The one check of a search's options, wherever they come from: ``nmt.load(...).translate(...)``, nmt-serve's
requests (through the same model object) and the flags of nmt-generate / nmt-interactive.

1. Types, without coercion, for callers that hand over values (the Python API, JSON requests): an integer
   option takes an integer (not ``True``, ``"5"`` or ``5.0``), a number option an integer or a float, a switch
   ``True`` or ``False``; the search plugin's options likewise (``types_checked``). Flags are text and are
   converted by the config loader instead.
2. The ranges declared on GenerationConfig and on the search plugin's config (``nmt.fields.opt``),
   checked by ``to_dataclass`` for every caller: e.g. ``lenpen`` in [-5, 5], ``unkpen`` in [-100, 100],
   ``temperature`` in [0.01, 100], every float finite.
3. The rules that depend on the model, run whenever a search is built (``check_fits_model``, from
   ``nmt.generation.inference.search_for``): ``beam`` at most the target vocabulary, ``min_len`` at most the
   output length limit of the shortest source, itself at most the model's target positions. Without the
   last one a minimum length would stretch every output past ``max_len_a``/``max_len_b`` up to the model's
   positions (a request's ``min_len`` of 1,000,000 made every sentence 1,023 tokens long).
   (``nbest`` at most ``beam`` is the Search base class's own check.)
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import reprlib
import typing
from typing import Any, Mapping

from nmt.config.generate import GenerationConfig
from nmt.data.dictionary import Dictionary
from nmt.errors import ConfigError
from nmt.generation.guards import check_beam_fits_vocabulary

_KIND_TEXT = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
_SHORT = reprlib.Repr()
_SHORT.maxstring = 40
_SHORT.maxother = 40


def type_problem(value: Any, kind: type) -> str | None:
    """Why ``value`` is not of ``kind`` (bool, int, float or str) without conversion, or None. True is not an
    integer here, an integer is a number, and numpy's integers and floats count as Python's."""
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    return None if ok else f"must be {_KIND_TEXT.get(kind, kind.__name__)}, not {type(value).__name__}"


def _plain(value: Any, kind: type, shown: str) -> Any:
    """``value`` (of ``kind``) as the Python value the config takes: numpy numbers become Python's, and an
    integer given for a number becomes a float (one too large for a float is refused as not finite)."""
    if kind is int:
        return int(value)
    if kind is float:
        try:
            return float(value)
        except OverflowError:
            raise ConfigError(f"{shown}: must be a finite number") from None
    return value


def _field_kind(annotation: Any) -> tuple[type, bool]:
    """(the scalar type, whether None is allowed) of a config field's annotation: ``Optional[int]`` -> (int, True)."""
    args = typing.get_args(annotation)
    if args:
        kinds = [a for a in args if a is not type(None)]
        return kinds[0], len(kinds) < len(args)
    return annotation, False


def types_checked(cls: type, values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``values`` for config dataclass ``cls`` with every type as declared (numpy numbers made Python's), else a
    ConfigError naming the option; unknown names are left to ``to_dataclass``. A plugin group (``search``) is a
    plugin name or a dict of the plugin's name and options, whose types are checked against the plugin's config."""
    from nmt.registry import REGISTRIES

    hints = typing.get_type_hints(cls)
    out = dict(values)
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        value = values[f.name]
        kind = f.metadata.get("plugin_group")
        if kind:
            if isinstance(value, Mapping) and isinstance(value.get("name"), str):
                registry = REGISTRIES[kind]
                options = {k: v for k, v in value.items() if k != "name"}
                out[f.name] = {"name": value["name"], **types_checked(registry.config_class(value["name"]), options,
                                                                      f"{where}{f.name}.")}
            elif not isinstance(value, str):
                raise ConfigError(f"{where}{f.name} {_SHORT.repr(value)}: must be a {kind} name (a string) or a dict "
                                  "of its name and options, e.g. {'name': 'sampling', 'temperature': 0.7}")
            continue
        scalar, optional = _field_kind(hints[f.name])
        if value is None and optional or scalar not in _KIND_TEXT:
            continue
        shown = f"{where}{f.name} {_SHORT.repr(value)}"
        why = type_problem(value, scalar)
        if why:
            raise ConfigError(f"{shown}: {why}")
        out[f.name] = _plain(value, scalar, shown)
    return out


def generation_config(options: Mapping[str, Any], where: str) -> GenerationConfig:
    """GenerationConfig from option values handed over by a caller: types checked without coercion
    (``types_checked``), then the declared ranges (``to_dataclass``). ``where`` starts each message ("translate()")."""
    from nmt.fields import to_dataclass

    prefix = f"{where}: "
    values = dict(options)
    if isinstance(values.get("search"), str):
        values["search"] = {"name": values["search"]}
    gen: GenerationConfig = to_dataclass(GenerationConfig, types_checked(GenerationConfig, values, prefix),
                                         where=f"{where}.")
    return gen


def shortest_output_limit(gen: GenerationConfig, target_positions: int) -> int:
    """The most tokens the search may generate before the eos for the shortest source (its eos alone, one token):
    ``max_len_a * 1 + max_len_b``, at most ``target_positions - 1`` (``Search.max_lengths`` without ``min_len``)."""
    cap = target_positions - 1
    return min(math.floor(gen.max_len_a + min(gen.max_len_b, cap)), cap)


def check_fits_model(gen: GenerationConfig, target_positions: int, tgt_dict: Dictionary, dict_name: str) -> None:
    """Refuse options the model cannot honour (see the module doc): ``beam`` above the target vocabulary, and
    ``min_len`` above the output length limit of the shortest source."""
    check_beam_fits_vocabulary(gen.beam, tgt_dict, dict_name)
    limit = shortest_output_limit(gen, target_positions)
    if gen.min_len > limit:
        raise ConfigError(
            f"--min-len {gen.min_len}: must be at most {limit}, the output length limit of the shortest source "
            f"(--max-len-a {gen.max_len_a:g} x 1 token + --max-len-b {gen.max_len_b}, at most the model's "
            f"{target_positions} target positions less the eos); lower --min-len (min_len) or raise --max-len-b")
