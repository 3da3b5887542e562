"""--dropout-final: the --dropout rate holds up to the first epoch of --dropout-rise-epochs, rises linearly to
--dropout-final at the second and holds there; only the --dropout modules change; nmt-train logs the rates, a run
stopped inside an epoch and resumed ends with the weights of the run that never stopped, and a wrong option is
refused in one line before anything is written."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fake_dictionary import FakeDict
from nmt.checkpoint.format import load_checkpoint
from nmt.config.model import ModelConfig
from nmt.cpu_speed import swap_layers
from nmt.errors import ConfigError
from nmt.models import build_model
from nmt.plugin_loader import load_plugins
from nmt.training.dropout_schedule import check_dropout_schedule, check_model_has_dropout, dropout_at, set_dropout
from train_toy_data import TINY_MODEL, call_train, make_toy_task, run_train

load_plugins()


def test_the_rate_holds_then_rises_linearly_then_holds():
    rising = ModelConfig(dropout=0.2, dropout_final=0.3, dropout_rise_epochs="10,30")
    rates = [dropout_at(rising, epoch) for epoch in (1, 10, 20, 25, 30, 80)]
    assert rates == pytest.approx([0.2, 0.2, 0.25, 0.275, 0.3, 0.3])
    assert dropout_at(ModelConfig(dropout=0.2), 80) == 0.2  # without --dropout-final: --dropout throughout
    falling = ModelConfig(dropout=0.3, dropout_final=0.1, dropout_rise_epochs="1,3")
    assert [dropout_at(falling, epoch) for epoch in (1, 2, 3)] == pytest.approx([0.3, 0.2, 0.1])


@pytest.mark.parametrize("epochs", ["30,10", "5,5", "0,4", "10", "ten,30", "1,2,3"])
def test_wrong_rise_epochs_are_refused(epochs):
    with pytest.raises(ConfigError, match="--dropout-rise-epochs"):
        check_dropout_schedule(ModelConfig(dropout_final=0.3, dropout_rise_epochs=epochs))
    check_dropout_schedule(ModelConfig(dropout_rise_epochs=epochs))  # not read without --dropout-final


@pytest.mark.parametrize("cpu_forms", [False, True])
def test_only_the_dropout_modules_change(cpu_forms):
    shape = dict(encoder_embed_dim=16, encoder_ffn_embed_dim=32, encoder_layers=2, encoder_attention_heads=2,
                 decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=2, decoder_attention_heads=2,
                 share_all_embeddings=True, dropout=0.1, attention_dropout=0.05, activation_dropout=0.07,
                 word_dropout=0.02)
    model = build_model(shape, FakeDict(24), FakeDict(24))
    if cpu_forms:
        swap_layers(model)  # LaneDropout modules in place of nn.Dropout
    before = {name: m.p for name, m in model.named_modules() if isinstance(m, nn.Dropout)}
    # per side: the embedder's, and one per sub-layer (encoder 2 x 2, decoder 2 x 3)
    assert set_dropout(model, 0.4) == 2 + 4 + 6
    for name, module in model.named_modules():
        if isinstance(module, nn.Dropout):
            assert module.p == (0.4 if name.endswith(".dropout") else before[name]), name
    assert {before[name] for name in before if not name.endswith(".dropout")} == {0.05, 0.07, 0.02}


def test_a_model_without_dropout_modules_is_refused():
    rising = ModelConfig(dropout_final=0.3)
    check_model_has_dropout(build_model({"encoder_embed_dim": 16, "decoder_embed_dim": 16, "encoder_layers": 1,
                                         "decoder_layers": 1, "encoder_ffn_embed_dim": 32,
                                         "decoder_ffn_embed_dim": 32, "encoder_attention_heads": 2,
                                         "decoder_attention_heads": 2}, FakeDict(24), FakeDict(24)), rising)
    with pytest.raises(ConfigError, match="--dropout-final: architecture transformer_base has no --dropout modules"):
        check_model_has_dropout(nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1)), rising)
    check_model_has_dropout(nn.Linear(2, 2), ModelConfig())  # nothing to check without --dropout-final


# ---------------------------------------------------------------------------------------------- through nmt-train

@pytest.fixture(scope="module")
def small_bin(tmp_path_factory):
    return make_toy_task(tmp_path_factory.mktemp("dropout"), n_train=200, n_valid=16)


def test_a_resumed_run_uses_the_rate_of_its_epoch(small_bin, tmp_path, capsys):
    """7 updates an epoch: the run stopped at update 10 (inside epoch 2) and resumed ends with the weights of the run
    that never stopped, which it can only do with epoch 2's rate after the resume."""
    run = [small_bin, *TINY_MODEL, "--max-tokens", "256", "--num-threads", "1", "--dropout", "0",
           "--dropout-final", "0.5", "--dropout-rise-epochs", "1,3"]
    run_train([*run, "--max-update", "21", "--save-dir", tmp_path / "straight"])
    log = capsys.readouterr().err
    assert "epoch 002: dropout 0.25 (--dropout-final)" in log and "epoch 003: dropout 0.5 (--dropout-final)" in log
    run_train([*run, "--max-update", "10", "--save-dir", tmp_path / "resumed"])
    run_train([*run, "--max-update", "21", "--save-dir", tmp_path / "resumed"])
    a, b = (load_checkpoint(tmp_path / d / "checkpoint_last.pt") for d in ("straight", "resumed"))
    assert a["training"]["num_updates"] == b["training"]["num_updates"] == 21
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    assert a["config"]["model"]["dropout_final"] == 0.5


@pytest.mark.parametrize("flags", [["--dropout-final", "0.3", "--dropout-rise-epochs", "3,1"],
                                   ["--dropout-final", "1"]])
def test_a_wrong_schedule_is_refused_in_one_line(small_bin, tmp_path, capsys, flags):
    save = tmp_path / "ck"
    assert call_train([small_bin, *TINY_MODEL, "--max-update", "2", "--save-dir", save, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flags[-2] in err[0] and not save.exists()
