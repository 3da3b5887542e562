"""--attention-key-dim (the paper's Table 3 row B): queries and keys of d_k per head, values of
d_model / heads. The projection shapes and parameter count, every built-in attention plugin training
and decoding with it (cached == full pass, beam search included), the default building exactly the
model it built before the option existed, and the one-line refusals (a plugin that does not take it,
the CTranslate2 export)."""

import dataclasses
from dataclasses import dataclass, field

import pytest
import torch
import torch.nn.functional as F

from nmt.checkpoint.errors import CheckpointError
from nmt.checkpoint.model_fit import build_model_from_weights
from nmt.cli.common import config_command
from nmt.config.cli_options import flag_specs
from nmt.config.model import ModelConfig, arch_preset
from nmt.config.train import TrainJob
from nmt.errors import ConfigError
from nmt.interop.ctranslate2_export import check_exportable
from nmt.models import build_model
from nmt.models.attention import AttentionBase
from nmt.plugin_loader import load_plugins
from nmt.registry import ATTENTION, register_attention
from test_model_transformer import PAD, FakeDict, assert_reordered_cache_continues, decode_stepwise, tokens

load_plugins()
torch.set_num_threads(1)

ATTENTIONS = ["scaled_dot_product", "additive", "restricted", "relative"]
D_K = 12  # with d_model 32 and 4 heads, d_v = 8: keys larger than values, and H * d_k != d_model


def shape(attention: str = "scaled_dot_product", **overrides):
    cfg = dict(encoder_embed_dim=32, encoder_ffn_embed_dim=48, encoder_layers=2, encoder_attention_heads=4,
               decoder_embed_dim=32, decoder_ffn_embed_dim=48, decoder_layers=2, decoder_attention_heads=4,
               dropout=0.0, max_source_positions=64, max_target_positions=64, attention_key_dim=D_K,
               attention={"name": attention})
    if attention == "restricted":
        cfg["attention"]["attention_window"] = 2
    if attention == "relative":
        cfg["attention"]["max_relative_position"] = 3
    cfg.update(overrides)
    return cfg


def tiny(attention: str = "scaled_dot_product", seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return build_model(shape(attention, **overrides), FakeDict(24), FakeDict(32))


def attention_params(d: int, heads: int, d_k: int) -> int:
    """W^Q, W^K (d -> H d_k), W^V and W^O (d -> d), with their biases."""
    return 2 * (d * heads * d_k + heads * d_k) + 2 * (d * d + d)


@pytest.mark.parametrize("d_k", [8, 32])
def test_projection_shapes_and_parameter_count_of_d_k_with_d_model_64_and_4_heads(d_k):
    model = tiny(encoder_embed_dim=64, decoder_embed_dim=64, attention_key_dim=d_k)
    default = tiny(encoder_embed_dim=64, decoder_embed_dim=64, attention_key_dim=None)
    self_attn, cross = model.decoder.layers[0].self_attn, model.decoder.layers[0].cross_attn
    assert (self_attn.key_dim, self_attn.head_dim) == (d_k, 16)
    assert self_attn.qkv_proj.weight.shape == (2 * 4 * d_k + 64, 64)
    assert self_attn.qkv_proj.bias.shape == (2 * 4 * d_k + 64,)
    assert model.encoder.layers[0].self_attn.qkv_proj.weight.shape == (2 * 4 * d_k + 64, 64)
    assert cross.q_proj.weight.shape == (4 * d_k, 64) and cross.kv_proj.weight.shape == (4 * d_k + 64, 64)
    assert cross.out_proj.weight.shape == (64, 64) and self_attn.scale == pytest.approx(d_k ** -0.5)
    sites = 2 + 2 * 2  # encoder self-attention, decoder self- and cross-attention, 2 layers each
    gained = sites * (attention_params(64, 4, d_k) - attention_params(64, 4, 16))
    assert sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in default.parameters()) == gained


def test_per_block_init_of_the_fused_projection():
    """Each of W^Q, W^K (4 d_k x d) and W^V (d x d) is Xavier-uniform on its own, with gain 1/sqrt(2)."""
    attn = tiny(encoder_embed_dim=64, decoder_embed_dim=64, attention_key_dim=32).encoder.layers[0].self_attn
    for block, rows in zip(attn.qkv_proj.weight.detach().split([128, 128, 64]), (128, 128, 64)):
        bound = 2 ** -0.5 * (6 / (64 + rows)) ** 0.5
        assert block.abs().max() <= bound and block.abs().max() > 0.9 * bound


def test_d_k_equal_to_d_model_over_heads_and_the_default_build_the_same_model_as_before():
    """16 = 64 / 4 heads changes nothing: same names, shapes, init and outputs as no option at all."""
    explicit = tiny(encoder_embed_dim=64, decoder_embed_dim=64, attention_key_dim=16).eval()
    default = tiny(encoder_embed_dim=64, decoder_embed_dim=64, attention_key_dim=None).eval()
    a, b = explicit.state_dict(), default.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    d = 64
    assert b["encoder.layers.0.self_attn.qkv_proj.weight"].shape == (3 * d, d)
    assert b["decoder.layers.0.cross_attn.q_proj.weight"].shape == (d, d)
    assert b["decoder.layers.0.cross_attn.kv_proj.weight"].shape == (2 * d, d)
    assert b["decoder.layers.0.self_attn.out_proj.weight"].shape == (d, d)
    src, prev = tokens(2, 7, 24, 1), tokens(2, 5, 32, 2)
    with torch.no_grad():
        assert torch.equal(explicit(src, None, prev), default(src, None, prev))


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_every_attention_plugin_runs_a_forward_pass_and_learns_with_it(attention):
    model = tiny(attention)
    assert {m.key_dim for m in model.modules() if isinstance(m, AttentionBase)} == {D_K}
    src, prev = tokens(4, 7, 24, 3), tokens(4, 6, 32, 4)
    src[0, 5:] = PAD
    target = torch.roll(prev, -1, dims=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(4):
        optimizer.zero_grad()
        logits = model(src, None, prev)
        assert logits.shape == (4, 6, 32)
        loss = F.cross_entropy(logits.reshape(-1, 32), target.reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    grads = {n: p.grad for n, p in model.named_parameters() if "attn" in n}
    assert all(g is not None and torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads.values())
    assert losses[-1] < losses[0]
    if attention == "relative":
        attn = model.encoder.layers[0].self_attn
        assert attn.relative_keys.shape == (7, D_K) and attn.relative_values.shape == (7, 8)
    if attention == "additive":
        assert model.encoder.layers[0].self_attn.score_vector.shape == (4, D_K)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_incremental_decoding_equals_full_pass(attention):
    model = tiny(attention).eval()
    src, prev = tokens(3, 9, 24, 5), tokens(3, 20, 32, 6)  # 20 steps: the key/value buffer grows past 16
    src[1, 6:] = PAD
    with torch.no_grad():
        full = model(src, None, prev)
        cached = decode_stepwise(model, src, prev)
    assert (full - cached).abs().max().item() < 1e-5


def test_reordered_cache_continues_like_the_reordered_batch():
    assert_reordered_cache_continues(tiny().eval().double())


def test_beam_search_scores_equal_the_full_pass():
    """Beams share their sentence's encoder-side cache (queries of d_k against one key row): the
    scores the search reports are the full forward pass's log-probs of the tokens it chose."""
    from nmt.config.generate import GenerationConfig
    from nmt.data.dictionary import Dictionary
    from nmt.generation.ensemble import EnsembleModel
    from nmt.generation.inference import pad_batch
    from nmt.generation.search import build_search

    d = Dictionary()
    for i in range(28):
        d.add_symbol(f"w{i}", 10)
    torch.manual_seed(0)
    model = build_model(shape(), d, d).eval()
    search = build_search(GenerationConfig(beam=3, nbest=3, max_len_b=8), d)
    rows = [d.encode_line(" ".join(f"w{int(i)}" for i in tokens(1, n, 28, n)[0])) for n in (3, 6)]
    src, lengths = pad_batch(rows, d.pad())
    with torch.inference_mode():
        results = search.search(EnsembleModel([model]), src, lengths)
        for i, hyps in enumerate(results):
            assert len(hyps) == 3
            for hyp in hyps:
                prev = torch.cat([torch.tensor([d.bos()]), hyp.tokens[:-1]])[None]
                logp = model(src[i:i + 1, :lengths[i]], None, prev).log_softmax(-1)[0]
                expected = logp.gather(-1, hyp.tokens[:, None])[:, 0]
                assert torch.allclose(hyp.positional_scores, expected, atol=1e-4)


SITES = [(True, False), (True, True), (False, False)]  # (self_attention, causal)


@pytest.mark.parametrize("name,self_attention,causal", [("scaled_dot_product", *s) for s in SITES]
                         + [("additive", *s) for s in SITES] + [("restricted", *s) for s in SITES[:2]])
def test_fused_path_equals_weights_path(name, self_attention, causal):
    """torch's fused kernel (values of another size than keys) == the explicit softmax(QK^T)V."""
    torch.manual_seed(0)
    options = {"attention_window": 3} if name == "restricted" else {}
    attn = ATTENTION.build(name, options, 32, 4, self_attention=self_attention, causal=causal, dropout=0.0,
                           key_dim=D_K).double().eval()
    g = torch.Generator().manual_seed(1)
    x, memory = torch.randn(2, 40, 32, generator=g, dtype=torch.double), torch.randn(2, 9, 32, dtype=torch.double)
    pad = torch.zeros(2, 9 if not self_attention else 40, dtype=torch.bool)
    pad[0, -3:] = True
    mask = None if causal else pad
    kv = None if self_attention else memory
    with torch.no_grad():
        fast, none = attn(x, kv, key_padding_mask=mask)
        slow, weights = attn(x, kv, key_padding_mask=mask, need_weights=True)
    assert none is None and weights.shape[:3] == (2, 4, 40) and fast.shape == (2, 40, 32)
    assert torch.allclose(fast, slow, atol=1e-12)


def test_a_plugin_that_does_not_take_it_is_refused_in_one_line_naming_it():
    @register_attention("same_size_only")
    class SameSizeOnly(AttentionBase):
        def attend(self, q, k, v, key_padding_mask, causal, need_weights):
            raise AssertionError("never built")

    with pytest.raises(ConfigError) as e:
        tiny(decoder_attention={"name": "same_size_only"})
    message = str(e.value)
    assert "--attention-key-dim 12" in message and "'same_size_only'" in message and "\n" not in message
    assert "--decoder-attention" in message
    tiny(decoder_attention={"name": "same_size_only"}, attention_key_dim=8)  # d_model / heads: nothing changes
    with pytest.raises(ConfigError, match="--attention-key-dim 12: attention SameSizeOnly"):
        SameSizeOnly(None, 32, 4, self_attention=True, key_dim=12)


def test_ctranslate2_export_refuses_it_in_one_line():
    model = tiny()
    with pytest.raises(ConfigError) as e:
        check_exportable(model, FakeDict(24), FakeDict(32))
    message = str(e.value)
    assert "--attention-key-dim" in message and "CTranslate2 cannot run" in message and "\n" not in message
    check_exportable(tiny(attention_key_dim=8), FakeDict(24), FakeDict(32))  # 32 / 4 heads: exportable


def test_stored_configs_with_and_without_the_key_build_their_models():
    """A checkpoint written before the option has no attention_key_dim: it means d_model / heads."""
    old = tiny(attention_key_dim=None)
    stored = dataclasses.asdict(old.cfg)
    del stored["attention_key_dim"]
    where = dict(source="checkpoint x", what="model config", fix="give another")
    again = build_model_from_weights(stored, old.state_dict(), FakeDict(24), FakeDict(32), **where)
    assert again.cfg.attention_key_dim is None
    new = tiny()
    again = build_model_from_weights(dataclasses.asdict(new.cfg), new.state_dict(), FakeDict(24), FakeDict(32),
                                     **where)
    assert again.decoder.layers[0].cross_attn.q_proj.weight.shape == (4 * D_K, 32)
    with pytest.raises(CheckpointError, match="does not match its tensors"):
        build_model_from_weights(stored, new.state_dict(), FakeDict(24), FakeDict(32), **where)


@dataclass
class Job:
    model: ModelConfig = field(default_factory=ModelConfig)


def test_the_flag_through_a_real_command(capsys):
    assert any(s.flag == "--attention-key-dim" and s.path == "model.attention_key_dim" for s in flag_specs(TrainJob))
    got = {}
    main = config_command("nmt-test", Job, lambda cfg: got.setdefault("cfg", cfg), preset=arch_preset)
    with pytest.raises(SystemExit) as e:
        main(["--attention-key-dim", "16"])
    assert e.value.code == 0 and got["cfg"].model.attention_key_dim == 16
    got.clear()
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 0 and got["cfg"].model.attention_key_dim is None
    with pytest.raises(SystemExit) as e:
        main(["--attention-key-dim", "0"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--attention-key-dim 0: must be >= 1" in err and err.count("\n") == 1


def test_the_model_card_names_d_k_only_when_it_is_set():
    from nmt.model_folder.card import model_card

    def card(model):
        manifest = {"source_lang": "en", "target_lang": "de", "model_config": dataclasses.asdict(model.cfg),
                    "parameters": sum(p.numel() for p in model.parameters()),
                    "weights": {"file": "model.safetensors", "dtype": "float32", "sha256": "0" * 64}}
        return model_card(manifest, {})

    assert ", attention key size d_k 12\n" in card(tiny())
    assert "d_k" not in card(tiny(attention_key_dim=None))
