"""Plugin registries: every swappable part of nmt is chosen by name.

The core defines the registries and never imports a plugin by name. Plugins import the
core's base classes and register themselves with a decorator, e.g.::

    from nmt.registry import register_attention

    @register_attention("multiplicative", config=MultiplicativeConfig)
    class MultiplicativeAttention(AttentionBase[MultiplicativeConfig]): ...

Plugins are found in three places (see :func:`load_plugins`): the built-ins under
``nmt.plugins``, a user folder given with ``--user-dir``, and installed packages that
declare the entry-point group ``nmt.plugins``.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import typing
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterator, Protocol, TypeVar

from nmt.errors import ConfigError
from nmt.fields import to_dataclass

T = TypeVar("T")


class PluginOptions(Protocol):
    """What a plugin's options are: an instance of a dataclass (the ``config`` it registers with)."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


# The type parameter of every plugin base class (``class Search(Generic[OptionsT])``): a plugin names its options
# dataclass there (``class SamplingSearch(PathSearch[SamplingConfig])``), so its ``self.cfg`` is typed. A base whose
# plugins share options binds its own type variable to a dataclass of them (``nmt.training.criterion``).
OptionsT = TypeVar("OptionsT", bound=PluginOptions)


@dataclass
class NoOptions:
    """The config of a plugin that declares no options of its own."""


def declared_options(cls: type, base: type) -> type | None:
    """The options class ``cls`` gives ``base`` (or a subclass of it) as its type argument: ``SamplingConfig`` for
    ``class SamplingSearch(PathSearch[SamplingConfig])``; None when it gives none (``class X(Search)``)."""
    for klass in cls.__mro__:
        for parent in vars(klass).get("__orig_bases__", ()):
            origin, args = typing.get_origin(parent), typing.get_args(parent)
            if isinstance(origin, type) and issubclass(origin, base) and args and isinstance(args[0], type):
                return args[0]
    return None


def shared_options(base: type) -> type | None:
    """The dataclass every plugin's options of ``base`` must extend (the bound of its type parameter, when that is
    a dataclass: ``nmt.training.criterion.CriterionOptions``), or None."""
    parameters = getattr(base, "__parameters__", ())
    bound = getattr(parameters[0], "__bound__", None) if parameters else None
    return bound if isinstance(bound, type) and dataclasses.is_dataclass(bound) else None


@dataclass(frozen=True)
class Entry:
    """One registered plugin: its class, its config dataclass and where it came from."""

    name: str
    obj: Any
    config: type
    origin: str  # "module:qualname (file)" of the registering object, for error messages
    help: str = ""


def _origin_of(obj: Any) -> str:
    module = getattr(obj, "__module__", "?")
    qualname = getattr(obj, "__qualname__", repr(obj))
    try:
        where = inspect.getsourcefile(obj) or "?"
    except TypeError:
        where = "?"
    return f"{module}.{qualname} ({where})"


def did_you_mean(name: str, choices: list[str]) -> str:
    """A ' did you mean "x"?' suffix for an error message, or '' when nothing is close."""
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f' Did you mean "{close[0]}"?' if close else ""


class Registry:
    """A name -> plugin table for one kind of component (attention, optimizer, ...).

    The one contract, for every kind: a plugin is a subclass of the kind's base class (``base``,
    "module:Class", imported only when a plugin of this kind registers), registered with its own
    config dataclass (the one it names as the base's type argument, when it does), and made by
    :meth:`build` as ``cls(config_instance, *context)``, where the context arguments are the kind's
    (docs/writing-plugins.md has the table)."""

    def __init__(self, kind: str, base: str, option: str | None = None):
        self.kind = kind
        self.base = base
        self.option = option or f"--{kind.replace('_', '-')}"  # the flag users choose it with
        self._entries: dict[str, Entry] = {}

    def base_class(self) -> type:
        module, _, name = self.base.partition(":")
        return getattr(importlib.import_module(module), name)

    def register(self, name: str, config: type | None = None, help: str = "") -> Callable[[T], T]:
        """Class decorator: ``@registry.register("name", config=ItsOptionsDataclass)``; without ``config``, the
        options class the plugin names as its base's type argument, else the base's shared options, else none."""
        if config is not None and not (isinstance(config, type) and dataclasses.is_dataclass(config)):
            raise TypeError(f"{self.kind} plugin {name!r}: config must be a dataclass class, got {config!r}")

        def decorator(obj: T) -> T:
            origin = _origin_of(obj)
            base = self.base_class()
            if not (isinstance(obj, type) and issubclass(obj, base)):
                raise ConfigError(f'{self.kind} plugin "{name}" ({origin}) must be a subclass of '
                                  f'{base.__module__}.{base.__qualname__}; see docs/writing-plugins.md')
            options = self._options_class(name, obj, base, config, origin)
            old = self._entries.get(name)
            if old is not None and old.origin != origin:
                raise ConfigError(
                    f'{self.kind} "{name}" is registered twice: by {old.origin} and by {origin}; '
                    "rename one of them"
                )
            doc = help or (inspect.getdoc(obj) or "").split("\n")[0]
            self._entries[name] = Entry(name, obj, options, origin, doc)
            return obj

        return decorator

    def _options_class(self, name: str, cls: type, base: type, config: type | None, origin: str) -> type:
        """The options dataclass plugin ``name`` is built with, checked against what its class declares."""
        declared, shared = declared_options(cls, base), shared_options(base)
        options = config or declared or shared or NoOptions
        where = f'{self.kind} plugin "{name}" ({origin})'
        if not dataclasses.is_dataclass(options):
            raise ConfigError(f"{where}: its options {options.__qualname__} must be a dataclass")
        if declared is not None and not issubclass(options, declared):
            raise ConfigError(f"{where} declares its options as {declared.__qualname__} but registers "
                              f"config={options.__qualname__}; name the same class in both places")
        if shared is not None and not issubclass(options, shared):
            raise ConfigError(f"{where}: its config {options.__qualname__} must extend {shared.__module__}."
                              f"{shared.__qualname__}, the options every {self.kind} takes; "
                              "see docs/writing-plugins.md")
        return options

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def choices(self) -> list[str]:
        return sorted(self._entries)

    def entry(self, name: str, flag: str | None = None) -> Entry:
        """The plugin registered as ``name``; ``flag`` is the option that named it, for the error."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            choices = self.choices()
            raise ConfigError(
                f'unknown {self.kind} "{name}" for {flag or self.option}; choices: {", ".join(choices) or "(none)"}.'
                + did_you_mean(str(name), choices)
                + " A plugin of your own is loaded with --user-dir DIR."
            ) from None

    def get(self, name: str) -> Any:
        """The plugin class (for its class attributes; make instances with :meth:`build`)."""
        return self.entry(name).obj

    def config_class(self, name: str) -> type:
        return self.entry(name).config

    def option_names(self, name: str) -> set[str]:
        """The options plugin ``name`` takes (its config dataclass's fields)."""
        return {f.name for f in dataclasses.fields(self.config_class(name))}

    def options(self, name: str, options: Any = None, *, flag: str | None = None, where: str = "",
                flag_prefix: str = "") -> Any:
        """Plugin ``name``'s config dataclass filled from ``options`` (a dict, which may hold
        ``name``; an omegaconf node; an instance; or None for the defaults), validated. ``flag``,
        ``where`` (its config path, "model.attention.") and ``flag_prefix`` ("decoder-") only make
        error messages name what the user typed."""
        return to_dataclass(self.entry(name, flag).config, options, where=where, flag_prefix=flag_prefix)

    def build(self, name: str, options: Any = None, *context: Any, **kwargs: Any) -> Any:
        """The one way to make a plugin: ``cls(its config filled from options, *context, **kwargs)``."""
        return self.get(name)(self.options(name, options), *context, **kwargs)


TOKENIZER = Registry("tokenizer", "nmt.data.text_pipeline:Tokenizer")
BPE = Registry("bpe", "nmt.data.text_pipeline:BPE")
ARCH = Registry("arch", "nmt.models.architecture:Architecture")
ATTENTION = Registry("attention", "nmt.models.attention:AttentionBase")
POSITIONAL = Registry("positional", "nmt.models.positional:PositionalBase")
OPTIMIZER = Registry("optimizer", "torch.optim:Optimizer")
LR_SCHEDULER = Registry("lr_scheduler", "nmt.training.lr_scheduler:LRScheduler", option="--lr-scheduler")
CRITERION = Registry("criterion", "nmt.training.criterion:Criterion")
SEARCH = Registry("search", "nmt.generation.search:Search", option="--search")
SCORER = Registry("scorer", "nmt.scoring:Scorer", option="--scoring")

REGISTRIES: dict[str, Registry] = {
    r.kind: r for r in (TOKENIZER, BPE, ARCH, ATTENTION, POSITIONAL, OPTIMIZER, LR_SCHEDULER, CRITERION, SEARCH,
                        SCORER)
}

register_tokenizer = TOKENIZER.register
register_bpe = BPE.register
register_arch = ARCH.register
register_attention = ATTENTION.register
register_positional = POSITIONAL.register
register_optimizer = OPTIMIZER.register
register_lr_scheduler = LR_SCHEDULER.register
register_criterion = CRITERION.register
register_search = SEARCH.register
register_scorer = SCORER.register
