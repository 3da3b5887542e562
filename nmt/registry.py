"""Plugin registries: every swappable part of nmt is chosen by name.

The core defines the registries and never imports a plugin by name. Plugins import the
core's base classes and register themselves with a decorator, e.g.::

    from nmt.registry import register_attention

    @register_attention("multiplicative", config=MultiplicativeConfig)
    class MultiplicativeAttention(AttentionBase): ...

Plugins are found in three places (see :func:`load_plugins`): the built-ins under
``nmt.plugins``, a user folder given with ``--user-dir``, and installed packages that
declare the entry-point group ``nmt.plugins``.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from nmt.errors import ConfigError


@dataclass(frozen=True)
class Entry:
    """One registered plugin: the object, its optional config dataclass and where it came from."""

    name: str
    obj: Any
    config: type | None
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
    """A name -> plugin table for one kind of component (attention, optimizer, ...)."""

    def __init__(self, kind: str, option: str | None = None):
        self.kind = kind
        self.option = option or f"--{kind.replace('_', '-')}"  # the flag users choose it with
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, config: type | None = None, help: str = "") -> Callable:
        """Decorator: ``@registry.register("name", config=SomeDataclass)``."""
        if config is not None and not dataclasses.is_dataclass(config):
            raise TypeError(f"{self.kind} plugin {name!r}: config must be a dataclass, got {config!r}")

        def decorator(obj: Any) -> Any:
            origin = _origin_of(obj)
            old = self._entries.get(name)
            if old is not None and old.origin != origin:
                raise ConfigError(
                    f'{self.kind} "{name}" is registered twice: by {old.origin} and by {origin}; '
                    "rename one of them"
                )
            doc = help or (inspect.getdoc(obj) or "").split("\n")[0]
            self._entries[name] = Entry(name, obj, config, origin, doc)
            return obj

        return decorator

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def choices(self) -> list[str]:
        return sorted(self._entries)

    def entry(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            choices = self.choices()
            raise ConfigError(
                f'unknown {self.kind} "{name}" for {self.option}; choices: {", ".join(choices) or "(none)"}.'
                + did_you_mean(name, choices)
                + " A plugin of your own is loaded with --user-dir DIR."
            ) from None

    def get(self, name: str) -> Any:
        return self.entry(name).obj

    def config_class(self, name: str) -> type | None:
        return self.entry(name).config

    def build(self, name: str, cfg: Any = None, *args: Any, **kwargs: Any) -> Any:
        """Instantiate plugin ``name``. ``cfg`` (its config dataclass, a dict, or None) is passed first
        when the plugin declared a config class."""
        entry = self.entry(name)
        if entry.config is None:
            return entry.obj(*args, **kwargs)
        return entry.obj(to_dataclass(entry.config, cfg), *args, **kwargs)


def to_dataclass(cls: type, value: Any) -> Any:
    """Coerce ``value`` (None, a dict, an omegaconf node or an instance) into dataclass ``cls``."""
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    from omegaconf import DictConfig, OmegaConf

    if isinstance(value, DictConfig):
        value = OmegaConf.to_container(value, resolve=True)
    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - names - {"name"})
    if unknown:
        raise ConfigError(f"{cls.__name__}: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    kept = {k: v for k, v in value.items() if k in names}
    from omegaconf.errors import OmegaConfBaseException

    try:
        schema = OmegaConf.structured(cls)
    except OmegaConfBaseException:  # a field type omegaconf cannot check: take the values as given
        return cls(**kept)
    try:  # typed merge: "1e-9" from a key=value override becomes a float, "abc" is refused
        return OmegaConf.to_object(OmegaConf.merge(schema, kept))
    except OmegaConfBaseException as e:
        raise ConfigError(f"{cls.__name__}: {str(e).splitlines()[0]}") from None


TOKENIZER = Registry("tokenizer")
BPE = Registry("bpe")
ARCH = Registry("arch")
MODEL = Registry("model")
ATTENTION = Registry("attention")
POSITIONAL = Registry("positional")
OPTIMIZER = Registry("optimizer")
LR_SCHEDULER = Registry("lr_scheduler", option="--lr-scheduler")
CRITERION = Registry("criterion")
SEARCH = Registry("search", option="--search")

REGISTRIES: dict[str, Registry] = {
    r.kind: r
    for r in (TOKENIZER, BPE, ARCH, MODEL, ATTENTION, POSITIONAL, OPTIMIZER, LR_SCHEDULER, CRITERION, SEARCH)
}

register_tokenizer = TOKENIZER.register
register_bpe = BPE.register
register_arch = ARCH.register
register_model = MODEL.register
register_attention = ATTENTION.register
register_positional = POSITIONAL.register
register_optimizer = OPTIMIZER.register
register_lr_scheduler = LR_SCHEDULER.register
register_criterion = CRITERION.register
register_search = SEARCH.register
