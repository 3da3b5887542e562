"""The plugin registry: duplicate names, unknown names, the base class, building with a config dataclass."""

from dataclasses import dataclass
from typing import Generic, TypeVar

import pytest

from nmt.errors import ConfigError
from nmt.fields import opt, to_dataclass
from nmt.registry import NoOptions, PluginOptions, Registry, did_you_mean


class Widget:
    """The base class of the test registry's plugins."""

    def __init__(self, cfg, *context):
        self.cfg, self.context = cfg, context


def widgets() -> Registry:
    return Registry("widget", f"{__name__}:Widget")


@dataclass
class WidgetConfig:
    size: int = opt(3, "How big.")
    label: str = opt("w", "What it says.")


def test_duplicate_name_names_both_places():
    reg = widgets()

    @reg.register("round")
    class Round(Widget):
        pass

    with pytest.raises(ConfigError) as e:
        @reg.register("round")
        class OtherRound(Widget):
            pass

    msg = str(e.value)
    assert "Round" in msg and "OtherRound" in msg and "test_registry.py" in msg and "registered twice" in msg
    reg.register("round")(Round)  # the same object registering again (re-import) is fine
    assert reg.get("round") is Round


def test_unknown_name_lists_choices_and_suggests():
    reg = widgets()
    for name in ("square", "round", "triangle"):
        reg.register(name)(type(name, (Widget,), {}))
    with pytest.raises(ConfigError) as e:
        reg.get("sqare")
    msg = str(e.value)
    assert 'unknown widget "sqare" for --widget' in msg
    assert "choices: round, square, triangle" in msg and 'Did you mean "square"?' in msg
    with pytest.raises(ConfigError) as e:
        reg.get("zzzz")
    assert "Did you mean" not in str(e.value)
    assert did_you_mean("adamw", ["adam", "sgd"]) == ' Did you mean "adam"?'


def test_build_passes_the_plugins_own_config_first():
    reg = widgets()

    @reg.register("boxed", config=WidgetConfig)
    class Boxed(Widget):
        pass

    @reg.register("plain")
    class Plain(Widget):
        pass

    built = reg.build("boxed", {"name": "boxed", "size": 7}, "x")
    assert built.cfg == WidgetConfig(size=7, label="w") and built.context == ("x",)
    assert reg.build("boxed", None, 1).cfg == WidgetConfig()
    plain = reg.build("plain", None, "y")
    assert plain.cfg == NoOptions() and plain.context == ("y",)
    with pytest.raises(ConfigError, match="unknown option.*size"):
        reg.build("plain", {"size": 2})
    with pytest.raises(ConfigError, match="unknown option.*colour"):
        reg.build("boxed", {"colour": "red"}, 1)
    with pytest.raises(TypeError, match="must be a dataclass"):
        reg.register("bad", config=dict)


def test_a_plugin_must_subclass_its_kinds_base_class():
    reg = widgets()
    with pytest.raises(ConfigError, match="must be a subclass of test_registry.Widget"):
        reg.register("loose")(type("Loose", (), {}))
    with pytest.raises(ConfigError, match="must be a subclass"):
        reg.register("function")(lambda cfg: None)


def test_to_dataclass_accepts_instances_dicts_and_ignores_name():
    inst = WidgetConfig(size=1)
    assert to_dataclass(WidgetConfig, inst) is inst
    assert to_dataclass(WidgetConfig, {"name": "boxed", "size": 2}).size == 2


def test_plugin_options_from_overrides_are_typed():
    """A key=value override arrives as a string: "1e-9" must become a float, "abc" a ConfigError."""
    from nmt.errors import ConfigError
    from nmt.plugin_loader import load_plugins
    from nmt.registry import OPTIMIZER

    load_plugins()
    cfg_cls = OPTIMIZER.entry("adam").config
    assert to_dataclass(cfg_cls, {"name": "adam", "adam_eps": "1e-9"}).adam_eps == 1e-9
    with pytest.raises(ConfigError, match="adam_eps|Float"):
        to_dataclass(cfg_cls, {"adam_eps": "abc"})


def test_plugins_written_against_nmt_config_fields_keep_working():
    """The field helpers moved to nmt.fields (below the registry and the configs); a plugin importing them from
    their old place, as docs/writing-plugins.md once showed, gets the same functions."""
    import nmt.config.fields as old_place
    import nmt.fields

    public = [name for name in vars(nmt.fields) if not name.startswith("_") and callable(getattr(nmt.fields, name))
              and getattr(getattr(nmt.fields, name), "__module__", "") == "nmt.fields"]
    assert "opt" in public and "plugin_group" in public
    assert all(getattr(old_place, name) is getattr(nmt.fields, name) for name in public)


OptionsT = TypeVar("OptionsT", bound=PluginOptions)


class TypedWidget(Generic[OptionsT]):
    """A base class generic over its plugins' options, as nmt's are (``Search[SamplingConfig]``)."""

    def __init__(self, cfg: OptionsT):
        self.cfg = cfg


@dataclass
class SharedOptions:
    """Options every plugin of a kind takes (as ``nmt.training.criterion.CriterionOptions``)."""

    loud: bool = opt(False, "Shout.")


SharedT = TypeVar("SharedT", bound=SharedOptions)


class SharingWidget(Generic[SharedT]):
    def __init__(self, cfg: SharedT):
        self.cfg = cfg


@dataclass
class BigWidgetConfig(WidgetConfig):
    big: bool = opt(True, "Big.")


def test_a_plugin_declares_its_options_as_its_base_classs_type_argument():
    """``class Sized(TypedWidget[WidgetConfig])`` types ``self.cfg`` for mypy; the registry builds it with that
    class when ``config=`` is left out, and refuses a ``config=`` that does not agree with it."""
    reg = Registry("widget", f"{__name__}:TypedWidget")

    @reg.register("sized")
    class Sized(TypedWidget[WidgetConfig]):
        pass

    assert reg.config_class("sized") is WidgetConfig and reg.build("sized", {"size": 5}).cfg == WidgetConfig(size=5)
    reg.register("bigger", config=BigWidgetConfig)(type("Bigger", (Sized,), {}))  # a subclass of the options: fine
    assert reg.config_class("bigger") is BigWidgetConfig
    reg.register("plain")(type("Plain", (TypedWidget,), {}))  # no type argument: no options, as before
    assert reg.config_class("plain") is NoOptions
    with pytest.raises(ConfigError) as e:
        @reg.register("confused", config=NoOptions)
        class Confused(TypedWidget[WidgetConfig]):
            pass

    assert "declares its options as WidgetConfig but registers config=NoOptions" in str(e.value)
    assert "confused" not in reg


def test_a_kind_whose_plugins_share_options_refuses_a_config_without_them():
    reg = Registry("widget", f"{__name__}:SharingWidget")
    reg.register("bare")(type("Bare", (SharingWidget,), {}))  # no config: the shared options
    assert reg.build("bare", {"loud": True}).cfg == SharedOptions(loud=True)
    with pytest.raises(ConfigError) as e:
        reg.register("own", config=WidgetConfig)(type("Own", (SharingWidget,), {}))
    assert "its config WidgetConfig must extend test_registry.SharedOptions, the options every widget takes" in str(
        e.value)


def test_a_users_criterion_gets_the_options_every_criterion_takes(monkeypatch):
    """Criterion reads sentence_avg and project_all_positions from its typed options: a criterion registered without
    a config gets them, one with a config of its own must extend CriterionOptions."""
    from nmt.plugin_loader import load_plugins
    from nmt.registry import CRITERION
    from nmt.training.criterion import Criterion, CriterionOptions

    load_plugins(None, ("criteria",))
    monkeypatch.setattr(CRITERION, "_entries", dict(CRITERION._entries))  # the test's plugin leaves with the test
    register = CRITERION.register("test_registry_plain_ce")
    register(type("PlainCE", (Criterion,), {"__module__": __name__}))
    built = CRITERION.build("test_registry_plain_ce", {"sentence_avg": True}, 1)
    assert isinstance(built.cfg, CriterionOptions) and built.sentence_avg and built.project_non_pad
    with pytest.raises(ConfigError, match="must extend nmt.training.criterion.CriterionOptions"):
        CRITERION.register("test_registry_own_ce", config=WidgetConfig)(type("OwnCE", (Criterion,), {}))


def test_every_built_in_plugin_names_its_options_type():
    """So that its ``self.cfg`` is typed: every built-in of a kind whose base class is generic gives the base its
    options class, the one it is built with (optimizers subclass torch.optim.Optimizer, which is not generic)."""
    from nmt.plugin_loader import load_plugins
    from nmt.registry import REGISTRIES, declared_options

    load_plugins()
    checked = 0
    for registry in REGISTRIES.values():
        base = registry.base_class()
        if not getattr(base, "__parameters__", ()):
            continue
        for name in registry:
            entry = registry.entry(name)
            if entry.obj.__module__.startswith("nmt.plugins."):
                assert declared_options(entry.obj, base) is entry.config, (registry.kind, name)
                checked += 1
    assert checked >= 20
