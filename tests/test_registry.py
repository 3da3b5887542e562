"""The plugin registry: duplicate names, unknown names, the base class, building with a config dataclass."""

from dataclasses import dataclass

import pytest

from nmt.errors import ConfigError
from nmt.fields import opt, to_dataclass
from nmt.registry import NoOptions, Registry, did_you_mean


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
