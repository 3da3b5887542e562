"""bf16 decoding with fp32 attention caches (AttentionBase.cache_dtype, set by
nmt.cpu_speed.apply.fp32_attention_caches): the cache holds fp32 keys and values, a step attends in
fp32 and hands bf16 back to the output projection, and searches (reordered, merged, shared encoder rows)
give exactly what a bf16 model gives whose attention upcasts its bf16 inputs itself."""

from __future__ import annotations

import pytest
import torch

import nmt.generation.search as search_module
from fake_dictionary import FakeDict
from nmt.config.generate import GenerationConfig
from nmt.cpu_speed.apply import fp32_attention_caches
from nmt.generation.ensemble import EnsembleModel
from nmt.generation.loading import load_ensemble
from nmt.generation.search import build_search
from nmt.models import build_model
from nmt.models.attention import AttentionBase
from nmt.models.decoder_cache import CacheEntry, DecoderCache
from nmt.plugin_loader import load_plugins
from nmt.registry import ATTENTION
from test_generate_setup import make_checkpoint, make_data_bin, split_batches

load_plugins()
SDPA = ATTENTION.get("scaled_dot_product")
SHAPE = dict(encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_layers=2, encoder_attention_heads=2,
             decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=2,
             dropout=0.0, max_source_positions=64, max_target_positions=64)


@pytest.fixture
def upcasting_attention(monkeypatch):
    """The reference: scaled dot-product attention that upcasts a decoding step's bf16 inputs itself, then attends
    as it does in fp32 (the explicit product, or the fused kernel for a few rows: their roundings differ on some CPUs,
    e.g. a Xeon with AMX, so the reference must choose between them as the fp32 cache's attention does)."""
    original = SDPA.attend

    def attend(self, q, k, v, key_padding_mask, causal, need_weights):
        if q.dtype == torch.bfloat16 and q.size(2) <= 16 and not torch.is_grad_enabled():
            out, weights = original(self, q.float(), k.float(), v.float(), key_padding_mask, causal, need_weights)
            return out.to(q.dtype), weights
        return original(self, q, k, v, key_padding_mask, causal, need_weights)

    monkeypatch.setattr(SDPA, "attend", attend)


def bf16_model(seed: int = 0, **changes) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model({**SHAPE, **changes}, FakeDict(50), FakeDict(50)).eval().to(torch.bfloat16)


def decode_steps(model: torch.nn.Module, steps: int = 5) -> tuple[list[torch.Tensor], dict[str, CacheEntry]]:
    """Logits of ``steps`` incremental decoder steps of 3 sentences, and the cache entries they leave."""
    g = torch.Generator().manual_seed(3)
    src, prev = torch.randint(4, 50, (3, 7), generator=g), torch.randint(4, 50, (3, steps), generator=g)
    state = DecoderCache()
    with torch.inference_mode():
        enc = model.encoder(src, torch.full((3,), 7))
        logits = [model.decoder(prev[:, :t + 1], enc, incremental_state=state)[0][:, -1] for t in range(steps)]
    return logits, {**state.self_attn, **state.cross_attn}


def test_a_step_attends_in_fp32_from_an_fp32_cache_and_returns_bf16(upcasting_attention):
    reference, plain_state = decode_steps(bf16_model())
    model = bf16_model()
    fp32_attention_caches(model)
    assert all(m.cache_dtype == torch.float32 for m in model.modules() if isinstance(m, AttentionBase)
               and m.state_key in plain_state)  # the decoder's self- and cross-attention
    logits, state = decode_steps(model)
    entries = list(state.values())
    assert len(entries) == 4  # 2 layers x (self, cross)
    assert all(e.k.dtype == e.v.dtype == torch.float32 for e in entries)
    assert all(e.k.dtype == torch.bfloat16 for e in plain_state.values())
    for got, want in zip(logits, reference):
        assert got.dtype == torch.bfloat16
        assert torch.equal(got, want)


def test_attention_that_does_not_support_it_keeps_the_models_dtype():
    model = bf16_model(decoder_attention={"name": "additive"})
    fp32_attention_caches(model)
    additive = [m for m in model.modules() if isinstance(m, AttentionBase) and not m.supports_fp32_cache]
    assert additive and all(m.cache_dtype is None for m in additive)
    logits, state = decode_steps(model)
    assert all(torch.isfinite(x.float()).all() for x in logits)
    assert {e.k.dtype for e in state.values()} == {torch.bfloat16, torch.float32}  # self, cross


@pytest.fixture(scope="module")
def data_and_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fp32_cache")
    data_bin = make_data_bin(folder, n_test=13)
    data, batches = split_batches(data_bin, 4)
    return data, batches, str(make_checkpoint(data_bin, folder / "m.pt", seed=1))


@pytest.mark.parametrize("beam", [1, 3])
def test_searches_with_refill_equal_upcasting_attention(data_and_model, upcasting_attention, monkeypatch, beam):
    data, batches, path = data_and_model
    monkeypatch.setattr(search_module, "REFILL_AT", 0.5)  # waiting sentences join running rows: merged caches
    search = build_search(GenerationConfig(beam=beam, nbest=beam, max_len_a=1.5, max_len_b=3), data.tgt_dict)
    results = []
    for cached_in_fp32 in (False, True):
        ens = load_ensemble(path, data.src_dict, data.tgt_dict)
        for m in ens.models:
            m.to(torch.bfloat16)
            if cached_in_fp32:
                fp32_attention_caches(m)
        results.append({i: [(h.tokens.tolist(), h.score) for h in hyps]
                        for i, hyps in search.search_stream(EnsembleModel(ens.models), batches)})
    assert sorted(results[0]) == list(range(13))
    assert results[1] == results[0]
