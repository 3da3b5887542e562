"""Relative-position self-attention (plugins/attention/relative.py), written only against the
plugin contract: it equals a naive (T, S, d) computation of Shaw et al.'s eq. 3-5, cached decoding
equals the full pass (also for merged, left-padded cache rows), --max-relative-position works
through nmt-train and nmt-generate, and a tiny model with it learns a copy task."""

from __future__ import annotations

import pytest
import torch

from fake_dictionary import PAD, FakeDict
from nmt.cpu_speed import swap_layers
from nmt.errors import ConfigError
from nmt.models import build_model
from nmt.models.decoder_cache import DecoderCache
from nmt.plugin_loader import load_plugins
from nmt.registry import ATTENTION
from test_attention_plugins import inputs
from test_generate_setup import call_cli, make_checkpoint, make_data_bin, split_batches
from train_toy_data import TINY_MODEL, call_train, make_toy_task, read_log, run_train

load_plugins()
torch.set_num_threads(1)



def make(causal: bool, k: int = 3, dim: int = 16, heads: int = 2, seed: int = 0):
    torch.manual_seed(seed)
    return ATTENTION.build("relative", {"max_relative_position": k}, dim, heads, self_attention=True,
                           causal=causal, dropout=0.0).double().eval()


def naive_attend(attn, q, k, v, key_padding_mask, causal):
    """Shaw et al. eq. 3-5 as written: a (T, S, D) tensor of a_ij per pair, distances from loops."""
    B, H, T, D = q.shape
    S = k.size(2)
    clip = attn.max_distance
    index = torch.empty(T, S, dtype=torch.long)
    for t in range(T):
        i = S - T + t  # the queries are the last T key positions
        for j in range(S):
            index[t, j] = min(max(j - i, -clip), clip) + clip
    a_k, a_v = attn.relative_keys[index], attn.relative_values[index]  # (T, S, D)
    scores = ((q[:, :, :, None, :] * (k[:, :, None, :, :] + a_k)).sum(-1)) / D ** 0.5  # (B, H, T, S)
    allowed = torch.ones(B, 1, T, S, dtype=torch.bool)
    if key_padding_mask is not None:
        allowed &= ~key_padding_mask[:, None, None, :]
    if causal:
        allowed &= torch.tensor([[j <= S - T + t for j in range(S)] for t in range(T)])
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)  # (B, H, T, S)
    out = (weights[..., None] * (v[:, :, None, :, :] + a_v)).sum(3)  # (B, H, T, D)
    return out, weights


@pytest.mark.parametrize("k", [1, 3, 20])  # 20: no distance of an 11-token input is clipped
@pytest.mark.parametrize("causal,padding", [(False, "right"), (False, None), (True, None), (True, "left")])
def test_output_and_weights_equal_the_naive_computation(k, causal, padding):
    attn = make(causal, k)
    x, mask = inputs()
    if padding is None:
        mask = None
    elif padding == "left":  # a cache row that joined later: its first positions are not its own
        mask = torch.zeros_like(mask)
        mask[1, :4] = True
    out, weights = attn(x, key_padding_mask=mask, need_weights=True)
    fast, none = attn(x, key_padding_mask=mask)
    q, kk, v = attn._heads(attn.qkv_proj(x), 3)
    ref, ref_w = naive_attend(attn, q, kk, v, mask, causal)
    ref = attn.out_proj(ref.transpose(1, 2).reshape(x.shape))
    real = torch.ones(2, 11, dtype=torch.bool) if padding != "left" else ~mask  # left pads are never queried
    assert weights.shape == (2, 2, 11, 11) and none is None
    assert torch.allclose(out[real], ref[real], atol=1e-12) and torch.allclose(fast[real], out[real], atol=1e-12)
    assert torch.allclose(weights.transpose(1, 2)[real], ref_w.transpose(1, 2)[real], atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_queries_that_are_the_last_keys_equal_the_naive_computation(causal):
    """While decoding, T < S: query t sits at key position S - T + t."""
    attn = make(causal, k=2)
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, n, 8, generator=g, dtype=torch.double) for n in (3, 9, 9))
    pads = torch.zeros(2, 9, dtype=torch.bool)
    pads[1, :5] = True
    out, weights = attn.attend(q, k, v, pads, causal, need_weights=True)
    ref, ref_w = naive_attend(attn, q, k, v, pads, causal)
    assert torch.allclose(out, ref, atol=1e-12) and torch.allclose(weights, ref_w, atol=1e-12)


def test_zero_relative_tables_give_scaled_dot_product_attention():
    rel, full = make(False), ATTENTION.build("scaled_dot_product", {}, 16, 2, self_attention=True,
                                             causal=False, dropout=0.0).double().eval()
    full.load_state_dict({k: v for k, v in rel.state_dict().items() if not k.startswith("relative_")})
    with torch.no_grad():
        rel.relative_keys.zero_()
        rel.relative_values.zero_()
    x, mask = inputs()
    assert torch.allclose(rel(x, key_padding_mask=mask)[0], full(x, key_padding_mask=mask)[0], atol=1e-12)


def test_gradients_match_finite_differences():
    attn = make(True, k=2, dim=8)
    x = torch.randn(1, 5, 8, dtype=torch.double, requires_grad=True)
    params = (attn.relative_keys, attn.relative_values)
    assert torch.autograd.gradcheck(lambda inp, *_: attn(inp)[0], (x, *params))


@pytest.mark.parametrize("cpu_forms", [False, True])
def test_dropout_drops_the_same_weights_in_both_value_terms(cpu_forms):
    """v = 1 and a^V = 1 for distances >= 1 only: z_i = sum_j alpha_ij + sum_{j > i} alpha_ij holds
    only if the value term and the relative-value term use the same dropped weights alpha (torch's dropout, or
    the lane mask of nmt.cpu_speed)."""
    torch.manual_seed(0)
    attn = ATTENTION.build("relative", {"max_relative_position": 1}, 4, 1, self_attention=True, causal=False,
                           dropout=0.5).double().train()
    if cpu_forms:
        swap_layers(attn)
    q, k = torch.randn(2, 1, 1, 6, 4, dtype=torch.double).unbind(0)
    with torch.no_grad():
        attn.relative_values.zero_()
        attn.relative_values[2] = 1.0  # bucket 2 = distance +1 (clipped: every key to the right)
    torch.manual_seed(5)
    out, weights = attn.attend(q, k, torch.ones_like(k), None, False, need_weights=True)
    # the same dropout mask again, from the same seed
    torch.manual_seed(5)
    dropped = attn.attention_dropout(weights)  # (1, 1, 6, 6)
    right = torch.ones(6, 6, dtype=torch.bool).triu(1)
    expected = dropped.sum(-1) + (dropped * right).sum(-1)  # (1, 1, 6)
    assert torch.allclose(out, expected[..., None].expand_as(out), atol=1e-12)


def test_bf16_autocast_stays_close_to_fp32_and_trains():
    attn = make(False, k=2, dim=32, heads=2).float()
    x, mask = inputs(n=40, dim=32, pad_from=30)
    x = x.float().requires_grad_()
    exact, _ = attn(x, key_padding_mask=mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low, _ = attn(x, key_padding_mask=mask)
    low.float().sum().backward()
    assert low.dtype == torch.bfloat16 and (low.float() - exact).abs().max().item() < 0.05
    assert all(torch.isfinite(p.grad).all() for p in attn.parameters()) and torch.isfinite(x.grad).all()


def test_option_is_checked_and_cross_attention_is_refused():
    with pytest.raises(ConfigError, match=r"--max-relative-position 0: must be >= 1"):
        ATTENTION.options("relative", {"max_relative_position": 0})
    with pytest.raises(ConfigError, match="RelativePositionAttention is for self-attention only"):
        ATTENTION.build("relative", {}, 16, 2, self_attention=False)
    assert ATTENTION.get("relative").supports_cross_attention is False


# ---- the decoder: cached == full pass -------------------------------------------------------


def tiny(k: int = 2):
    cfg = dict(encoder_embed_dim=16, encoder_ffn_embed_dim=32, encoder_layers=2, encoder_attention_heads=2,
               decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=2, decoder_attention_heads=2,
               dropout=0.1, max_source_positions=64, max_target_positions=64,
               attention={"name": "relative", "max_relative_position": k})
    torch.manual_seed(0)
    return build_model(cfg, FakeDict(24), FakeDict(32)).eval().double()


def tokens(b, n, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab, (b, n), generator=g)


def decode(model, enc, prev, state, steps):
    """Feed steps ``steps`` of ``prev`` one by one through the cache; logits (B, len(steps), V)."""
    return torch.cat([model.decoder(prev[:, : t + 1], enc, incremental_state=state) for t in steps], dim=1)


def test_the_model_uses_relative_self_attention_and_dot_product_cross_attention():
    assert tiny().plugin_names() == {"encoder_attention": "relative", "decoder_attention": "relative",
                                     "cross_attention": "scaled_dot_product", "encoder_positional": "sinusoidal",
                                     "decoder_positional": "sinusoidal"}


@pytest.mark.parametrize("length", [7, 40])  # 40: the key/value buffer grows 16 -> 34 -> 70
def test_cached_decoding_equals_the_full_pass(length):
    model = tiny()
    src, prev = tokens(3, 9, 24, 1), tokens(3, length, 32, 2)
    src[1, 6:] = PAD
    with torch.no_grad():
        full = model(src, None, prev)
        cached = decode(model, model.encoder(src), prev, DecoderCache(), range(length))
    assert (full - cached).abs().max().item() < 1e-10


def test_reordered_cache_continues_like_the_reordered_batch():
    model = tiny()
    src, prev = tokens(3, 6, 24, 10), tokens(3, 8, 32, 11)
    order = torch.tensor([2, 2, 0])
    with torch.no_grad():
        enc, state = model.encoder(src), DecoderCache()
        decode(model, enc, prev, state, range(5))
        model.reorder_incremental_state(state, order)
        reordered = prev.index_select(0, order)
        steps = decode(model, model.reorder_encoder_out(enc, order), reordered, state, range(5, 8))
        full = model(src.index_select(0, order), None, reordered)
    assert (steps - full[:, 5:]).abs().max().item() < 1e-10


def test_merged_left_padded_rows_keep_their_own_distances():
    """A sentence that joins the cache 4 steps late is right-aligned behind 4 left pads: its
    distances j - i must be its own (as if decoded alone), also after the pads are dropped."""
    model = tiny(k=2)
    src_a, prev_a = tokens(2, 7, 24, 20), tokens(2, 9, 32, 21)
    src_b, prev_b = tokens(1, 5, 24, 22), tokens(1, 5, 32, 23)
    with torch.no_grad():
        full_a, full_b = model(src_a, None, prev_a), model(src_b, None, prev_b)
        enc_a, state_a = model.encoder(src_a), DecoderCache()
        first_a = decode(model, enc_a, prev_a, state_a, range(5))
        enc_b, state_b = model.encoder(src_b), DecoderCache()
        first_b = decode(model, enc_b, prev_b, state_b, range(1))
        enc = model.merge_encoder_out(enc_a, enc_b)
        state = state_a.merge(state_b)  # b: 4 leading positions not its own
        late = 5 - 1
        merged_prev = torch.cat([prev_a, torch.cat([prev_b.new_full((1, late), PAD), prev_b], 1)[:, :9]])
        steps = decode(model, enc, merged_prev, state, range(5, 8))  # (3, 3, V)
        # a's rows finish; b continues alone and its leading positions are dropped from the cache
        keep = torch.tensor([2])
        model.reorder_incremental_state(state, keep, drop_left=late)
        last = decode(model, model.reorder_encoder_out(enc, keep), prev_b, state, range(4, 5))
    assert (first_a - full_a[:, :5]).abs().max().item() < 1e-10
    assert (steps[:2] - full_a[:, 5:8]).abs().max().item() < 1e-10
    got_b = torch.cat([first_b, steps[2:], last], dim=1)  # b's steps 0, 1..3, 4
    assert (got_b - full_b).abs().max().item() < 1e-10


def test_search_refilling_rows_equals_batch_by_batch(tmp_path, monkeypatch):
    """The searches merge cache rows of different ages (the default cache: refill stays enabled)."""
    import nmt.generation.search as search_module
    from nmt.config.generate import GenerationConfig
    from nmt.generation.loading import load_ensemble
    from nmt.generation.search import build_search

    data_bin = make_data_bin(tmp_path, n_test=13)
    data, batches = split_batches(data_bin, 4)
    path = make_checkpoint(data_bin, tmp_path / "rel.pt", attention={"name": "relative", "max_relative_position": 2})
    ens = load_ensemble(str(path), data.src_dict, data.tgt_dict)
    assert ens.can_merge
    merges = []
    original = type(ens).merge
    monkeypatch.setattr(type(ens), "merge", lambda self, *a: (merges.append(1), original(self, *a))[1])
    results = []
    for refill_at in (0.0, 0.5):
        monkeypatch.setattr(search_module, "REFILL_AT", refill_at)
        search = build_search(GenerationConfig(beam=1, max_len_a=1.5, max_len_b=3), data.tgt_dict)
        results.append({i: [(h.tokens.tolist(), h.positional_scores) for h in hyps]
                        for i, hyps in search.search_stream(ens, batches)})
    assert merges and sorted(results[0]) == sorted(results[1]) == list(range(13))
    for sid, alone in results[0].items():
        (tokens_a, scores_a), = alone
        (tokens_b, scores_b), = results[1][sid]
        assert tokens_a == tokens_b and torch.allclose(scores_a, scores_b, atol=1e-4), sid


# ---- through the real CLI -------------------------------------------------------------------

FAST = [*TINY_MODEL, "--max-tokens", "256", "--num-threads", "1", "--dropout", "0"]


@pytest.fixture(scope="module")
def copy_bin(tmp_path_factory):
    return make_toy_task(tmp_path_factory.mktemp("copy"), n_train=100, n_valid=16)


def test_train_records_the_option_and_generate_translates(copy_bin, tmp_path, capsys):
    from nmt.checkpoint.format import load_checkpoint
    from nmt.cli.generate import main as generate_main

    save = tmp_path / "ck"
    run_train([copy_bin, *FAST, "--attention", "relative", "--max-relative-position", "4",
               "--decoder-max-relative-position", "2", "--max-update", "4", "--save-dir", save])
    state = load_checkpoint(save / "checkpoint_last.pt")
    model_config = state["model_config"]
    assert model_config["attention"] == {"name": "relative", "max_relative_position": 4}
    assert model_config["decoder_attention"].get("max_relative_position") == 2
    assert ("attention", "relative") in {(r["kind"], r["name"]) for r in state["plugins"]}
    tables = {k: tuple(v.shape) for k, v in state["model"].items() if k.endswith("relative_keys")}
    assert tables and all(shape[0] == (9 if k.startswith("encoder") else 5) for k, shape in tables.items())
    assert not any("cross_attn.relative" in k for k in state["model"])  # cross-attention stays dot-product
    capsys.readouterr()
    code = call_cli(generate_main, [copy_bin, "--path", save / "checkpoint_last.pt", "--gen-subset", "valid",
                                    "--beam", "2", "--max-len-b", "5", "--threads", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert sum(line.startswith("H-") for line in out.splitlines()) == 16


@pytest.mark.parametrize("flags,message", [
    (["--attention", "relative", "--max-relative-position", "0"], "--max-relative-position 0: must be >= 1"),
    (["--attention", "relative", "--decoder-max-relative-position", "0"],
     "--decoder-max-relative-position 0: must be >= 1 (model.decoder_attention.max_relative_position)"),
    (["--cross-attention", "relative"], "--cross-attention relative: attention 'relative' is for self-attention only"),
])
def test_bad_settings_exit_2_with_one_line(copy_bin, tmp_path, capsys, flags, message):
    assert call_train([copy_bin, *FAST, *flags, "--save-dir", tmp_path / "ck"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("nmt-train: error:")]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in err


@pytest.mark.slow
def test_a_tiny_model_with_relative_attention_learns_to_copy(tmp_path):
    data = make_toy_task(tmp_path / "copy", n_train=1000, n_valid=16, vocab=8, max_len=6)
    save = tmp_path / "ck"
    run_train([data, *FAST, "--attention", "relative", "--max-relative-position", "4", "--lr", "2e-3",
               "--warmup-updates", "10", "--adam-betas", "(0.9,0.98)", "--label-smoothing", "0",
               "--max-update", "200", "--validate-interval-updates", "40", "--log-interval", "50",
               "--no-save", "--save-dir", save])
    valid = [v["nll_loss"] for v in read_log(save, "valid")]  # bits per token
    assert valid[0] > 2.5  # near chance at first (8 tokens and the end of sentence)
    assert valid[-1] < 1.2 and valid[-1] < valid[0] / 2.5, valid
