"""The recipe files in examples/ load through nmt-train's own command line (every key known, every plugin option
owned by its plugin), and none is fitted to one machine: one file serves every budget on every CPU, since its
schedule follows the budget (issue 62)."""

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


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_each_recipe_loads_through_nmt_train(name):
    assert resolved(EXAMPLES / name)["model"]["arch"] == {"name": "transformer_tiny"}


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_no_recipe_counts_updates_fitted_to_a_machine(name):
    """A schedule that ends at an update count (a cosine's period, a max-update) fits the CPU it was counted on; the
    recipes' schedules follow --stop-time-hours (or the command's --max-update) instead."""
    recipe = resolved(EXAMPLES / name)
    assert recipe["lr_scheduler"]["name"] in ("wsd", "linear", "cosine_budget")
    assert recipe["lr_scheduler"].get("lr_period_updates") is None and not recipe["optimization"]["max_update"]


def test_the_quickstart_recipe_has_relative_positions_and_label_smoothing_0_2():
    recipe = resolved(EXAMPLES / "multi30k_cpu.yaml")
    assert recipe["model"]["attention"] == {"name": "relative", "max_relative_position": 16}
    assert recipe["model"]["positional"] == {"name": "none"}
    assert recipe["criterion"]["label_smoothing"] == 0.2
