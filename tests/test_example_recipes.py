"""The recipe files in examples/ load through nmt-train's own command line (every key known, every plugin option
owned by its plugin), and the 30-minute recipe is the 15-minute one with exactly the change its comments and
docs/recipes.md describe, so the two cannot drift apart unnoticed."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from nmt.cli.common import config_command
from nmt.config.model import arch_preset
from nmt.config.train import TrainJob
from nmt.plugin_loader import load_plugins

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def resolved(yaml_file: Path) -> dict[str, Any]:
    """The train config that `nmt-train DATA --config yaml_file` would run with, as plain data."""
    load_plugins()
    got: dict[str, Any] = {}
    main = config_command("nmt-train", TrainJob, lambda cfg: got.setdefault("cfg", cfg), preset=arch_preset)
    with pytest.raises(SystemExit) as exit_:
        main(["--config", str(yaml_file)])
    assert exit_.value.code == 0
    return dataclasses.asdict(got["cfg"])


def differences(a: Any, b: Any, path: str = "") -> dict[str, tuple[Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: dict[str, tuple[Any, Any]] = {}
        for key in sorted(set(a) | set(b)):
            out.update(differences(a.get(key), b.get(key), f"{path}.{key}" if path else key))
        return out
    return {} if a == b else {path: (a, b)}


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_each_recipe_loads_through_nmt_train(name):
    assert resolved(EXAMPLES / name)["model"]["arch"] == {"name": "transformer_tiny"}


def test_the_30_minute_recipe_is_the_quickstart_s_with_its_one_change():
    """Its schedule: a half-cosine to 0 at an update count, where the quickstart's warmup-stable-decay follows the
    budget."""
    changed = differences(resolved(EXAMPLES / "multi30k_cpu.yaml"), resolved(EXAMPLES / "multi30k_cpu_30min.yaml"))
    assert {key: new for key, (_, new) in changed.items()} == {
        "lr_scheduler.name": "cosine", "lr_scheduler.lr_period_updates": 8800,  # the half-cosine, to 0
        "lr_scheduler.min_lr": 0.0, "lr_scheduler.cooldown_fraction": None,
    }


def test_the_quickstart_recipe_has_relative_positions_and_label_smoothing_0_2():
    recipe = resolved(EXAMPLES / "multi30k_cpu.yaml")
    assert recipe["model"]["attention"] == {"name": "relative", "max_relative_position": 16}
    assert recipe["model"]["positional"] == {"name": "none"}
    assert recipe["criterion"]["label_smoothing"] == 0.2
