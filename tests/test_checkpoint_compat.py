"""A checkpoint written by an older nmt (format 1, tests/fixtures/checkpoint_v1, made before the
plugin-contract change) still loads, is migrated to the current format, and translates exactly as it
did then: nmt-generate prints the same hypotheses, scores and alignments."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from nmt.checkpoint import versions
from nmt.checkpoint.format import load_checkpoint, save_checkpoint
from nmt.checkpoint.safe_read import read_file
from nmt.checkpoint.versions import FORMAT_VERSION, MIGRATIONS, upgrade_from_v1
from nmt.cli.generate import main as generate_main
from nmt.cli.train import main as train_main
from nmt.config.compat import upgrade_config_v1
from test_generate_setup import call_cli

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "checkpoint_v1"
CHECKPOINT = FIXTURE / "checkpoint_v1.pt"


def expected_text() -> str:
    return (FIXTURE / "generate_valid_beam5.txt").read_text()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_fixture_is_format_1():
    assert read_file(CHECKPOINT)["format_version"] == 1  # as stored, before any migration


def test_every_older_version_has_a_migration_step():
    assert FORMAT_VERSION == 2
    assert sorted(MIGRATIONS) == list(range(versions.OLDEST_VERSION, FORMAT_VERSION))


def test_a_format_1_checkpoint_loads_migrated():
    state = load_checkpoint(CHECKPOINT)
    assert state["format_version"] == FORMAT_VERSION
    assert state["model_config"]["attention"] == {"name": "restricted", "attention_window": 3}
    assert state["training"]["num_updates"] > 0 and state["model"]


def test_the_migration_calls_the_config_upgrades(monkeypatch):
    import nmt.config.compat as compat

    seen = []
    monkeypatch.setattr(compat, "upgrade_config_v1", lambda c: seen.append("config") or {**c, "upgraded": True})
    monkeypatch.setattr(compat, "upgrade_model_config_v1", lambda m: seen.append("model") or {**m, "upgraded": True})
    state = upgrade_from_v1({"format_version": 1, "config": {"a": 1}, "model_config": {"b": 2}, "model": {}})
    assert seen == ["config", "model"] and state["format_version"] == 2
    assert state["config"] == {"a": 1, "upgraded": True} and state["model_config"] == {"b": 2, "upgraded": True}


def test_a_migrated_checkpoint_saves_in_the_current_format(tmp_path):
    save_checkpoint(tmp_path / "c.pt", load_checkpoint(CHECKPOINT))
    assert read_file(tmp_path / "c.pt")["format_version"] == FORMAT_VERSION


@pytest.mark.slow  # a beam search over 16 sentences: a few seconds
def test_generate_on_the_format_1_checkpoint_prints_what_it_printed_then(capsys):
    before = {p: sha256(p) for p in FIXTURE.rglob("*") if p.is_file()}
    code = call_cli(generate_main, [FIXTURE / "data-bin", "--path", CHECKPOINT, "--gen-subset", "valid",
                                    "--beam", "5", "--print-alignment"])
    out, err = capsys.readouterr()
    assert code == 0, err

    def lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if line[:2] in ("H-", "P-", "A-")]

    expected = lines(expected_text())
    assert len(expected) == 3 * 16
    assert lines(out) == expected
    assert {p: sha256(p) for p in FIXTURE.rglob("*") if p.is_file()} == before  # loading never rewrites it
    def bleu(text: str) -> list[str]:  # the BLEU line (a chrF line was added after the fixture was made)
        return [line.split(" (BP")[0] for line in text.splitlines()
                if line.startswith("Generate valid with beam=5: BLEU")]

    assert bleu(out) == bleu(expected_text()) != []


def test_the_migration_moves_the_restricted_window_and_the_positions():
    state = load_checkpoint(CHECKPOINT)
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


def test_a_model_config_without_decoder_start_starts_from_bos():
    """model.decoder_start came after some checkpoints were written: a stored config without it gets its default
    (<s>) when the model is built, so generation reads the field typed, with no default of its own."""
    from nmt.data.dictionary import Dictionary
    from nmt.generation.ensemble import EnsembleModel
    from nmt.generation.inference import decoder_start
    from nmt.generation.loading import load_model

    state = load_checkpoint(CHECKPOINT)
    for model_config in (state["model_config"], state["config"]["model"]):
        del model_config["decoder_start"]
    src, tgt = (Dictionary.load(FIXTURE / "data-bin" / f"dict.{lang}.txt") for lang in ("src", "tgt"))
    model = load_model(str(CHECKPOINT), src, tgt, state=state)
    assert model.cfg.decoder_start == "<s>"
    assert decoder_start(EnsembleModel([model]), tgt) is None  # the dictionary's <s>
