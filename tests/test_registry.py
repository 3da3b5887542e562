"""The plugin registry: duplicate names, unknown names, building with a config dataclass."""

from dataclasses import dataclass

import pytest

from nmt.config.fields import opt
from nmt.errors import ConfigError
from nmt.registry import Registry, did_you_mean, to_dataclass


@dataclass
class WidgetConfig:
    size: int = opt(3, "How big.")
    label: str = opt("w", "What it says.")


def test_duplicate_name_names_both_places():
    reg = Registry("widget")

    @reg.register("round")
    class Round:
        pass

    with pytest.raises(ConfigError) as e:
        @reg.register("round")
        class OtherRound:
            pass

    msg = str(e.value)
    assert "Round" in msg and "OtherRound" in msg and "test_registry.py" in msg and "registered twice" in msg
    reg.register("round")(Round)  # the same object registering again (re-import) is fine
    assert reg.get("round") is Round


def test_unknown_name_lists_choices_and_suggests():
    reg = Registry("widget")
    for name in ("square", "round", "triangle"):
        reg.register(name)(type(name, (), {}))
    with pytest.raises(ConfigError) as e:
        reg.get("sqare")
    msg = str(e.value)
    assert 'unknown widget "sqare" for --widget' in msg
    assert "choices: round, square, triangle" in msg and 'Did you mean "square"?' in msg
    with pytest.raises(ConfigError) as e:
        reg.get("zzzz")
    assert "Did you mean" not in str(e.value)
    assert did_you_mean("adamw", ["adam", "sgd"]) == ' Did you mean "adam"?'


def test_build_passes_a_config_dataclass_first():
    reg = Registry("widget")

    @reg.register("boxed", config=WidgetConfig)
    class Boxed:
        def __init__(self, cfg, extra):
            self.cfg, self.extra = cfg, extra

    @reg.register("plain")
    class Plain:
        def __init__(self, extra):
            self.extra = extra

    built = reg.build("boxed", {"size": 7}, "x")
    assert built.cfg == WidgetConfig(size=7, label="w") and built.extra == "x"
    assert reg.build("boxed", None, 1).cfg == WidgetConfig()
    assert reg.build("plain", None, "y").extra == "y"
    with pytest.raises(ConfigError, match="unknown option.*colour"):
        reg.build("boxed", {"colour": "red"}, 1)
    with pytest.raises(TypeError, match="must be a dataclass"):
        reg.register("bad", config=dict)


def test_to_dataclass_accepts_instances_dicts_and_ignores_name():
    inst = WidgetConfig(size=1)
    assert to_dataclass(WidgetConfig, inst) is inst
    assert to_dataclass(WidgetConfig, {"name": "boxed", "size": 2}).size == 2


def test_plugin_options_from_overrides_are_typed():
    """A key=value override arrives as a string: "1e-9" must become a float, "abc" a ConfigError."""
    from nmt.errors import ConfigError
    from nmt.plugin_loader import load_plugins
    from nmt.registry import OPTIMIZER, to_dataclass

    load_plugins()
    cfg_cls = OPTIMIZER.entry("adam").config
    assert to_dataclass(cfg_cls, {"name": "adam", "adam_eps": "1e-9"}).adam_eps == 1e-9
    with pytest.raises(ConfigError, match="adam_eps|Float"):
        to_dataclass(cfg_cls, {"adam_eps": "abc"})
