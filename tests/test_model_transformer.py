"""The Transformer's behaviour: causality, padding invariance, cached decoding == full pass for
every attention and positional plugin, beam reordering, embedding sharing, weights on request."""

import itertools

import pytest
import torch

from fake_dictionary import PAD, FakeDict
from nmt.errors import ConfigError, DataError
from nmt.models import build_model
from nmt.models.decoder_cache import DecoderCache
from nmt.plugin_loader import load_plugins

load_plugins()
torch.set_num_threads(1)

ATTENTIONS = ["scaled_dot_product", "additive", "restricted"]
POSITIONALS = ["sinusoidal", "learned"]


def tiny(**overrides):
    cfg = dict(encoder_embed_dim=16, encoder_ffn_embed_dim=32, encoder_layers=2, encoder_attention_heads=2,
               decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=2, decoder_attention_heads=2,
               dropout=0.1, max_source_positions=64, max_target_positions=64)
    cfg.update({k: {"name": v} if isinstance(v, str) and k.endswith(("attention", "positional")) else v
                for k, v in overrides.items()})
    if cfg.get("attention", {}).get("name") == "restricted":
        cfg["attention"]["attention_window"] = 2
    torch.manual_seed(0)
    return build_model(cfg, FakeDict(24), FakeDict(32)).eval().double()


def tokens(b, n, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab, (b, n), generator=g)


def decode_stepwise(model, src, prev):
    enc = model.encoder(src)
    state = DecoderCache()
    steps = [model.decoder(prev[:, : t + 1], enc, incremental_state=state) for t in range(prev.size(1))]
    return torch.cat(steps, dim=1)  # (B, T, V)


@pytest.mark.parametrize("attention,positional,pre_norm",
                         [(a, p, False) for a, p in itertools.product(ATTENTIONS, POSITIONALS)]
                         + [("scaled_dot_product", "sinusoidal", True)])
def test_incremental_decoding_equals_full_pass(attention, positional, pre_norm):
    model = tiny(attention=attention, positional=positional, encoder_normalize_before=pre_norm,
                 decoder_normalize_before=pre_norm).float()
    src, prev = tokens(3, 9, 24, 1), tokens(3, 7, 32, 2)
    src[1, 6:] = PAD
    with torch.no_grad():
        full = model(src, None, prev)
        cached = decode_stepwise(model, src, prev)
    assert (full - cached).abs().max().item() < 1e-5


def test_long_cached_decoding_across_cache_growth_equals_full_pass():
    model = tiny(decoder_layers=1).float()
    src, prev = tokens(2, 5, 24, 20), tokens(2, 40, 32, 21)  # the key/value buffer grows 16 -> 34 -> 70
    with torch.no_grad():
        assert (model(src, None, prev) - decode_stepwise(model, src, prev)).abs().max().item() < 1e-5


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_future_tokens_never_change_earlier_outputs(attention):
    model = tiny(attention=attention)
    src, prev = tokens(2, 8, 24, 3), tokens(2, 9, 32, 4)
    changed = prev.clone()
    changed[:, 5:] = tokens(2, 4, 32, 5)
    with torch.no_grad():
        a, b = model(src, None, prev), model(src, None, changed)
    assert torch.allclose(a[:, :5], b[:, :5], atol=1e-10)
    assert not torch.allclose(a[:, 5:], b[:, 5:])  # the change is visible where it should be


@pytest.mark.parametrize("attention,normalize_before",
                         [(a, False) for a in ATTENTIONS] + [("scaled_dot_product", True)])
def test_padding_never_changes_non_pad_outputs(attention, normalize_before):
    model = tiny(attention=attention, encoder_normalize_before=normalize_before,
                 decoder_normalize_before=normalize_before)
    short_src, long_src = tokens(1, 5, 24, 6), tokens(1, 9, 24, 7)
    short_prev, long_prev = tokens(1, 4, 32, 8), tokens(1, 8, 32, 9)
    src = torch.full((2, 9), PAD)
    src[0, :5], src[1] = short_src[0], long_src[0]
    prev = torch.full((2, 8), PAD)
    prev[0, :4], prev[1] = short_prev[0], long_prev[0]
    with torch.no_grad():
        batch = model(src, None, prev)
        alone = model(short_src, None, short_prev)
        other = model(long_src, None, long_prev)
        enc_batch, enc_alone = model.encoder(src).out, model.encoder(short_src).out
    assert torch.allclose(batch[0, :4], alone[0], atol=1e-10)
    assert torch.allclose(batch[1], other[0], atol=1e-10)
    assert torch.allclose(enc_batch[0, :5], enc_alone[0], atol=1e-10)


def test_reordered_cache_continues_like_the_reordered_batch():
    assert_reordered_cache_continues(tiny())


def assert_reordered_cache_continues(model) -> None:
    """After 3 steps, reordering the cache (rows 2, 2, 0) and 2 more steps give the full pass of the reordered
    batch (also used by the attention-key-dim tests)."""
    src, prev = tokens(3, 6, 24, 10), tokens(3, 5, 32, 11)
    order = torch.tensor([2, 2, 0])
    with torch.no_grad():
        enc = model.encoder(src)
        state = DecoderCache()
        for t in range(3):
            model.decoder(prev[:, : t + 1], enc, incremental_state=state)
        model.reorder_incremental_state(state, order)
        enc = model.reorder_encoder_out(enc, order)
        reordered = prev.index_select(0, order)
        steps = [model.decoder(reordered[:, : t + 1], enc, incremental_state=state) for t in range(3, 5)]
        full = model(src.index_select(0, order), None, reordered)
    assert torch.allclose(torch.cat(steps, 1), full[:, 3:], atol=1e-10)


def test_share_all_embeddings_ties_one_matrix_and_refuses_different_dictionaries():
    model = build_model(dict(encoder_embed_dim=16, decoder_embed_dim=16, encoder_attention_heads=2,
                             decoder_attention_heads=2, encoder_layers=1, decoder_layers=1,
                             share_all_embeddings=True), FakeDict(32), FakeDict(32))
    enc_w, dec_w = model.encoder.embed_tokens.weight, model.decoder.embed_tokens.weight
    assert enc_w is dec_w and model.decoder.output_weight is dec_w
    assert torch.all(enc_w[PAD] == 0)
    for tgt in (FakeDict(40), FakeDict(32, tag="other")):
        with pytest.raises(ConfigError, match="share-all-embeddings"):
            build_model({"share_all_embeddings": True}, FakeDict(32), tgt)


def test_share_decoder_input_output_embed_and_untied_default():
    tied = tiny(share_decoder_input_output_embed=True)
    untied = tiny()
    assert tied.decoder.output_weight is tied.decoder.embed_tokens.weight
    assert untied.decoder.output_weight is not untied.decoder.embed_tokens.weight
    assert sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in tied.parameters()) == 32 * 16


def test_pre_norm_has_final_layer_norms_and_post_norm_has_none():
    assert tiny(encoder_normalize_before=True, decoder_normalize_before=True).encoder.final_norm is not None
    post = tiny()
    assert post.encoder.final_norm is None and post.decoder.final_norm is None


def test_features_only_and_output_layer_on_any_leading_shape():
    model = tiny()
    src, prev = tokens(2, 5, 24, 12), tokens(2, 4, 32, 13)
    with torch.no_grad():
        logits = model(src, None, prev)
        feats = model(src, None, prev, features_only=True)
        flat = model.output_layer(feats[prev != PAD])  # (N, V): only the positions a criterion needs
    assert feats.shape == (2, 4, 16)
    assert torch.allclose(flat, logits[prev != PAD])


def test_attention_weights_per_layer_and_head_sum_to_one():
    model = tiny(attention="additive")
    src, prev = tokens(2, 6, 24, 14), tokens(2, 5, 32, 15)
    src[0, 4:] = PAD
    with torch.no_grad():
        w = model.attention_weights(src, None, prev)
    assert [len(w[k]) for k in ("encoder", "self", "cross")] == [2, 2, 2]
    assert w["cross"][0].shape == (2, 2, 5, 6) and w["self"][0].shape == (2, 2, 5, 5)
    assert torch.allclose(w["cross"][1].sum(-1), torch.ones(2, 2, 5, dtype=torch.double))
    assert torch.all(w["cross"][0][0, :, :, 4:] == 0)  # padding gets no weight
    assert torch.all(w["self"][0].triu(1) == 0)  # no weight on the future


def test_plugin_names_are_recorded_and_restricted_stays_out_of_cross_attention():
    model = tiny(attention="restricted", decoder_positional="learned")
    assert model.plugin_names() == {
        "encoder_attention": "restricted", "decoder_attention": "restricted",
        "cross_attention": "scaled_dot_product", "encoder_positional": "sinusoidal",
        "decoder_positional": "learned"}
    assert (model.max_source_positions, model.max_target_positions) == (64, 64)


@pytest.mark.parametrize("name", ["restricted", "relative", "self_only_user_plugin"])
def test_cross_attention_naming_a_self_attention_only_plugin_is_refused_by_the_builder(name, monkeypatch):
    """The flag alone is enough: a plugin (built-in or a user's) that sets supports_cross_attention = False
    and checks nothing itself is refused at the encoder-decoder site, in one line naming the option."""
    from nmt.models.attention import AttentionBase
    from nmt.registry import ATTENTION, register_attention

    if name not in ATTENTION:
        monkeypatch.setattr(ATTENTION, "_entries", dict(ATTENTION._entries))  # registered for this test only

        @register_attention(name)
        class SelfOnly(AttentionBase):
            supports_cross_attention = False

    message = f"--cross-attention {name}: attention '{name}' is for self-attention only; choose another " \
              "--cross-attention (e.g. scaled_dot_product)"
    with pytest.raises(ConfigError) as refused:
        tiny(cross_attention=name)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert tiny(attention=name).plugin_names()["cross_attention"] == "scaled_dot_product"


def test_learned_positions_past_the_table_are_a_clear_error():
    model = tiny(positional="learned", max_source_positions=8)
    with pytest.raises(DataError, match="--max-source-positions 8"):
        model.encoder(tokens(1, 9, 24, 16))


def test_bad_shape_and_unknown_plugin_are_config_errors():
    with pytest.raises(ConfigError, match="divisible"):
        tiny(encoder_attention_heads=3)
    with pytest.raises(ConfigError, match="unknown attention"):
        tiny(attention="scaled_dot")


def test_embeddings_are_scaled_by_sqrt_d():
    model = tiny(dropout=0.0)
    tok = tokens(1, 3, 24, 17)
    emb = model.encoder.embedder
    expected = emb.embed_tokens(tok) * 4.0 + emb.positional(3)
    assert torch.allclose(emb(tok), expected)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_bf16_autocast_forward_and_backward_stay_finite(attention):
    model = tiny(attention=attention).float().train()
    src, prev = tokens(2, 7, 24, 18), tokens(2, 5, 32, 19)
    src[0, 5:] = PAD
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(src, None, prev)
    logits.float().logsumexp(-1).sum().backward()
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
