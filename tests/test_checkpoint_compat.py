"""A checkpoint written before the one plugin contract (format 1, tests/fixtures/checkpoint_v1) still
loads, is migrated, and translates exactly as it did; old config spellings get a one-line pointer to
the new one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nmt.cli.generate import main as generate_main
from nmt.cli.train import main as train_main
from nmt.config.compat import upgrade_config_v1
from nmt.training.checkpoints import load_checkpoint
from test_generate_setup import call_cli

FIXTURE = Path(__file__).with_name("fixtures") / "checkpoint_v1"
KINDS = ("S-", "T-", "H-", "D-", "P-", "A-")


def output_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(KINDS)]


@pytest.fixture
def data_bin(tmp_path) -> Path:
    """A copy: the raw reference path in the BLEU line is the only place the folder shows."""
    return Path(shutil.copytree(FIXTURE / "data-bin", tmp_path / "DATA"))


def test_a_format_1_checkpoint_translates_as_before(data_bin, capsys, monkeypatch):
    monkeypatch.chdir(data_bin.parent)
    code = call_cli(generate_main, ["DATA", "--path", str(FIXTURE / "checkpoint_v1.pt"), "--gen-subset", "valid",
                                    "--beam", "5", "--print-alignment"])
    out, err = capsys.readouterr()
    assert code == 0, err
    expected = (FIXTURE / "generate_valid_beam5.txt").read_text()
    assert output_lines(out) == output_lines(expected)
    assert len(output_lines(out)) == 16 * len(KINDS)
    bleu = [line for line in out.splitlines() if line.startswith("Generate valid")]
    assert bleu == [line for line in expected.splitlines() if line.startswith("Generate valid")]


def test_the_migration_moves_the_restricted_window_and_the_positions():
    state = load_checkpoint(FIXTURE / "checkpoint_v1.pt")
    assert state["format_version"] == 2
    model = state["model_config"]
    assert model["arch"] == {"name": "transformer_tiny"}
    assert model["attention"] == {"name": "restricted", "attention_window": 3}
    assert model["encoder_attention"] == {"name": None} and model["cross_attention"] == {"name": None}
    assert model["decoder_positional"] == {"name": "learned"} and model["positional"] == {"name": "sinusoidal"}
    assert (model["max_source_positions"], model["max_target_positions"]) == (64, 64)
    assert "attention_window" not in model
    config = state["config"]
    assert "max_source_positions" not in config["task"] and config["model"]["max_target_positions"] == 64


def test_a_zero_position_limit_of_format_1_becomes_the_default():
    """Format 1 trained with --max-source-positions 0 as "no limit" but stored 0 (nmt-generate then refused
    every sentence)."""
    config = upgrade_config_v1({"task": {"max_source_positions": 0, "max_target_positions": 0},
                                "model": {"arch": "transformer_tiny", "max_source_positions": 0,
                                          "max_target_positions": 0}})
    assert config["model"]["max_source_positions"] == 1024 and config["model"]["max_target_positions"] == 1024


@pytest.mark.parametrize("argv,new", [
    (["model.attention_window=8"], "model.attention.attention_window"),
    (["attention_window=8"], "model.attention.attention_window"),
    (["task.max_source_positions=8"], "model.max_source_positions"),
    (["precision.fp16_scaler_on_cpu=true"], "--fp16 needs CUDA"),
])
def test_an_old_spelling_names_the_new_one(tmp_path, capsys, argv, new):
    code = call_cli(train_main, [str(FIXTURE / "data-bin"), "--save-dir", str(tmp_path / "ck"), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("nmt-train: error:") and new in err[0], err
    assert not (tmp_path / "ck").exists()
