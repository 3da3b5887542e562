"""A layer that names another plugin for a group (a flag or key=value over a recipe's YAML, or a run's saved
config.yaml) drops the options the layers below set for the old plugin and the new one does not take; the
options both take carry over, and an option given beside the new name is still refused when it is not the new
plugin's. Checked through nmt-train's own command line."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from nmt.cli.common import config_command
from nmt.config.loader import save_config
from nmt.config.model import arch_preset
from nmt.config.train import TrainJob
from nmt.plugin_loader import load_plugins

RECIPE = Path(__file__).resolve().parents[1] / "examples" / "multi30k_cpu.yaml"  # relative attention


def train_config(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any] | str:
    """The config `nmt-train DATA *argv` would run with, as plain data; or its one-line error."""
    load_plugins()
    got: dict[str, Any] = {}
    main = config_command("nmt-train", TrainJob, lambda cfg: got.setdefault("cfg", cfg), preset=arch_preset)
    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in argv])
    if exit_.value.code != 0:
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("nmt-train: error:")]
        assert len(errors) == 1
        return errors[0]
    return dataclasses.asdict(got["cfg"])


def test_a_flag_switching_the_recipes_attention_drops_the_old_plugins_options(capsys):
    cfg = train_config(["--config", RECIPE, "--attention", "scaled_dot_product", "--positional", "sinusoidal"],
                       capsys)
    assert isinstance(cfg, dict)
    assert cfg["model"]["attention"] == {"name": "scaled_dot_product"}
    assert cfg["model"]["positional"]["name"] == "sinusoidal"
    assert cfg["lr_scheduler"]["cooldown_fraction"] == 0.2  # the rest of the recipe stays


def test_options_the_new_plugin_takes_carry_over_and_the_others_get_its_defaults(tmp_path, capsys):
    run = tmp_path / "run.yaml"
    run.write_text("model:\n  attention: {name: restricted, attention_window: 3}\n"
                   "lr_scheduler: {name: inverse_sqrt, warmup_updates: 4000, warmup_init_lr: 1.0e-7}\n")
    cfg = train_config(["--config", run, "--attention", "relative", "lr_scheduler.name=cosine",
                        "--lr-period-updates", "9000"], capsys)
    assert isinstance(cfg, dict)
    assert cfg["model"]["attention"] == {"name": "relative", "max_relative_position": 16}
    scheduler = cfg["lr_scheduler"]
    assert scheduler["name"] == "cosine" and scheduler["lr_period_updates"] == 9000
    assert (scheduler["warmup_updates"], scheduler["warmup_init_lr"]) == (4000, 1.0e-7)  # cosine takes both


def test_a_site_that_inherits_the_switched_group_loses_the_old_options_too(tmp_path, capsys):
    run = tmp_path / "run.yaml"
    run.write_text("model:\n  attention: {name: restricted, attention_window: 3}\n"
                   "  encoder_attention: {attention_window: 5}\n"
                   "  decoder_attention: {name: restricted, attention_window: 2}\n")
    cfg = train_config(["--config", run, "--attention", "relative"], capsys)
    assert isinstance(cfg, dict)
    model = cfg["model"]
    assert model["encoder_attention"] == {"name": None}  # inherits relative, with relative's options
    assert model["decoder_attention"] == {"name": "restricted", "attention_window": 2}  # names its own plugin


@pytest.mark.parametrize("argv,message", [
    (["--attention", "scaled_dot_product", "--max-relative-position", "8"],
     "--attention scaled_dot_product takes no option max_relative_position (--max-relative-position)"),
    (["model.attention.name=scaled_dot_product", "model.attention.max_relative_position=8"],
     "--attention scaled_dot_product takes no option max_relative_position"),
])
def test_an_option_given_beside_the_new_name_is_still_refused(argv, message, capsys):
    error = train_config(["--config", RECIPE, *argv], capsys)
    assert isinstance(error, str) and message in error


def test_a_saved_run_config_takes_another_plugin(tmp_path, capsys):
    """A run's config.yaml holds every option of its plugins: switching one from it must not need editing."""
    first = train_config(["--config", RECIPE], capsys)
    assert isinstance(first, dict)
    saved = tmp_path / "config.yaml"
    save_config(OmegaConf.create(first), saved)
    cfg = train_config(["--config", saved, "--attention", "restricted", "--attention-window", "4",
                        "--lr-scheduler", "inverse_sqrt"], capsys)
    assert isinstance(cfg, dict)
    assert cfg["model"]["attention"] == {"name": "restricted", "attention_window": 4}
    assert cfg["lr_scheduler"] == {"name": "inverse_sqrt", "warmup_updates": 500, "warmup_init_lr": -1.0}
