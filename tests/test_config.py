"""Config layering: defaults < preset < YAML < flags < key=value; unknown keys, wrong types and
bad YAML are one-line errors. Checked through resolve_config and through a real command."""

from dataclasses import dataclass, field

import pytest
from omegaconf import OmegaConf

from nmt.cli.common import config_command
from nmt.config.loader import resolve_config
from nmt.errors import ConfigError, UsageError
from nmt.fields import opt


@dataclass
class Optim:
    lr: float = opt(0.1, "Learning rate.")
    warmup: int = opt(10, "Warmup steps.")


@dataclass
class Job:
    name: str = opt("default", "A name.")
    layers: int = opt(1, "Layers.")
    dropout: float = opt(0.0, "Dropout.")
    optim: Optim = field(default_factory=Optim)


def preset(cfg):
    return {"layers": 6, "dropout": 0.3, "name": "preset"}


def test_each_layer_overrides_the_ones_below(tmp_path):
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("name: yaml\ndropout: 0.2\noptim:\n  lr: 0.5\n")
    cfg = resolve_config(Job, preset=preset, yaml_file=yaml_file,
                         flags={"name": "flag", "optim.warmup": 99}, overrides=["name=override", "lr=0.7"])
    assert cfg.layers == 6  # preset over default
    assert cfg.dropout == 0.2  # yaml over preset
    assert cfg.optim.warmup == 99  # flag over default
    assert cfg.optim.lr == 0.7  # key=value (a unique leaf name) over yaml
    assert cfg.name == "override"  # key=value over flag over yaml over preset
    assert resolve_config(Job).name == "default"


def test_preset_sees_user_layers_and_does_not_reset_them(tmp_path):
    seen = {}

    def arch(cfg):
        seen["layers"] = cfg.layers
        return {"layers": 12, "dropout": 0.1}

    cfg = resolve_config(Job, preset=arch, flags={"layers": 2})
    assert cfg.layers == 2 and cfg.dropout == 0.1 and seen["layers"] == 2


def test_unknown_key_in_each_layer(tmp_path):
    with pytest.raises(ConfigError, match='no config key "layres".*Did you mean "layers"'):
        resolve_config(Job, overrides=["layres=3"])
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("optim:\n  lrr: 1\n")
    with pytest.raises(ConfigError, match="c.yaml: unknown config key"):
        resolve_config(Job, yaml_file=yaml_file)
    with pytest.raises(UsageError, match="not of the form key=value"):
        resolve_config(Job, overrides=["layers"])


def test_wrong_type_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match='bad value for "layers"'):
        resolve_config(Job, overrides=["layers=many"])
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("optim:\n  warmup: soon\n")
    with pytest.raises(ConfigError, match="c.yaml.*warmup"):
        resolve_config(Job, yaml_file=yaml_file)


def test_bad_or_missing_yaml(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml: not valid YAML"):
        resolve_config(Job, yaml_file=bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        resolve_config(Job, yaml_file=listy)
    with pytest.raises(UsageError, match="no such file"):
        resolve_config(Job, yaml_file=tmp_path / "none.yaml")


def test_generated_flags_through_a_real_command(tmp_path, capsys):
    got = {}
    main = config_command("nmt-test", Job, lambda cfg: got.setdefault("cfg", cfg), preset=preset)
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("dropout: 0.25\nname: yaml\n")
    with pytest.raises(SystemExit) as e:
        main(["--config", str(yaml_file), "--name", "flag", "--lr", "0.01", "optim.warmup=5"])
    assert e.value.code == 0
    cfg = got["cfg"]
    assert isinstance(cfg, Job) and isinstance(cfg.optim, Optim)
    assert (cfg.name, cfg.layers, cfg.dropout, cfg.optim.lr, cfg.optim.warmup) == ("flag", 6, 0.25, 0.01, 5)
    with pytest.raises(SystemExit) as e:
        main(["--layers", "x"])
    assert e.value.code == 2 and "--layers" in capsys.readouterr().err  # click rejects a non-integer flag
    with pytest.raises(SystemExit) as e:
        main(["layers=x"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and err.startswith("nmt-test: error:")
    assert OmegaConf.structured(Job).layers == 1
