"""--word-dropout: in training a whole input token's embedding is zeroed (its position kept) with the given
probability and the kept ones scaled by 1 / (1 - p), on both sides; in evaluation, and so in every exported
engine, the model is the one without it; nmt-train takes the option, saves it, and refuses a rate outside [0, 1)."""

from __future__ import annotations

import pytest
import torch

from fake_dictionary import FakeDict
from nmt.checkpoint.format import load_checkpoint
from nmt.models import build_model
from nmt.plugin_loader import load_plugins
from train_toy_data import TINY_MODEL, call_train, make_toy_task

load_plugins()
V = 24
SHAPE = dict(encoder_embed_dim=16, encoder_ffn_embed_dim=32, encoder_layers=1, encoder_attention_heads=2,
             decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=1, decoder_attention_heads=2,
             dropout=0.0, max_source_positions=64, max_target_positions=64, share_all_embeddings=True)


def _model(word_dropout: float):
    torch.manual_seed(0)
    return build_model({**SHAPE, "word_dropout": word_dropout}, FakeDict(V), FakeDict(V))


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_whole_tokens_dropped_positions_kept(side):
    embedder = getattr(_model(0.5), side).embedder.train()
    tokens = torch.randint(4, V, (8, 40))
    torch.manual_seed(1)
    x = embedder(tokens)  # (B, L, C)
    positions = embedder.positional(tokens.size(1), 0)  # (L, C)
    words = embedder.embed_tokens(tokens) * embedder.scale
    dropped = torch.isclose(x, positions.expand_as(x), atol=1e-6).all(-1)  # (B, L): the word's embedding is gone
    kept = torch.isclose(x, words * 2.0 + positions, atol=1e-5).all(-1)  # scaled by 1 / (1 - 0.5)
    assert bool((dropped | kept).all()), "each token is dropped whole or kept whole, nothing in between"
    share = dropped.float().mean().item()
    assert dropped.numel() == 320 and 0.35 < share < 0.65  # about half of 320 draws


def test_evaluation_is_the_model_without_it():
    with_it, without = _model(0.3).eval(), _model(0.0).eval()
    assert with_it.state_dict().keys() == without.state_dict().keys()  # nothing to save, nothing to export
    src = torch.randint(4, V, (3, 7))
    prev = torch.randint(4, V, (3, 5))
    torch.testing.assert_close(with_it(src, None, prev)[0], without(src, None, prev)[0], rtol=0, atol=0)


def test_train_option_saved_and_checked(tmp_path, capsys):
    data = make_toy_task(tmp_path / "toy", n_train=40, n_valid=8)
    save = tmp_path / "ck"
    common = [data, *TINY_MODEL, "--max-tokens", "256", "--max-update", "2", "--save-dir", save]
    assert call_train([*common, "--word-dropout", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--word-dropout" in err[0] and not save.exists()
    assert call_train([*common, "--word-dropout", "0.1"]) == 0
    assert load_checkpoint(save / "checkpoint_last.pt")["config"]["model"]["word_dropout"] == 0.1
