"""The one seam of nmt's CPU speed tricks (nmt/cpu_speed/): the model nmt.models builds is the paper's plain code
(nn.Linear, nn.Dropout, F.linear), and ``swap_layers`` / ``for_inference`` give it the CPU forms of its layers on
the same parameters: the state dict (keys and values) and the random state untouched, fp32 outputs bit for bit
those of the plain model (a forward pass, greedy and beam searches through the decoding cache), packed fp32 weights
equal to the last bits with the same hypotheses, and the commands that load a model to translate applying it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import nmt.plugins.search.beam  # noqa: F401  (registers the strategies)
import nmt.plugins.search.greedy  # noqa: F401
from fake_dictionary import FakeDict
from nmt.config.generate import GenerationConfig
from nmt.cpu_speed import for_inference, swap_layers
from nmt.cpu_speed.dropout import LaneDropout
from nmt.cpu_speed.linear import BucketedLinear, BucketedProjection, PackedProjection
from nmt.generation.ensemble import EnsembleModel
from nmt.generation.search import build_search
from nmt.models import build_model
from nmt.plugin_loader import load_plugins
from test_import_graph import import_graph
from test_search_toy_models import BOS, EOS, SPECIALS

load_plugins()
torch.set_num_threads(1)
V = 24
SHAPE = dict(encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_layers=2, encoder_attention_heads=2,
             decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=2,
             dropout=0.1, attention_dropout=0.1, activation_dropout=0.1, max_source_positions=64,
             max_target_positions=64, share_all_embeddings=True)
needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN")


def plain_model(state: dict | None = None) -> nn.Module:
    torch.manual_seed(0)
    model = build_model(SHAPE, FakeDict(V), FakeDict(V))
    if state is not None:
        model.load_state_dict(state)
    return model.eval()


def copy_batch(g: torch.Generator, rows: int = 16, length: int = 6) -> tuple[torch.Tensor, ...]:
    """(source (B, S) ending with eos, decoder input (B, S) starting with bos, target (B, S)): copy the source."""
    words = torch.randint(4, V, (rows, length), generator=g)
    src = torch.cat([words, torch.full((rows, 1), EOS)], 1)  # (B, S)
    return src, torch.cat([torch.full((rows, 1), BOS), words], 1), src


@pytest.fixture(scope="module")
def trained_state() -> dict:
    """Weights after a short copy-task training with the CPU forms, as nmt-train runs it: searches that are not
    ties between near-uniform distributions."""
    model = swap_layers(plain_model()).train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    for _ in range(150):
        src, prev, target = copy_batch(g)
        loss = F.cross_entropy(model(src, None, prev).flatten(0, 1), target.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
    return {k: v.clone() for k, v in model.state_dict().items()}


def sources() -> tuple[torch.Tensor, torch.Tensor]:
    src, _, _ = copy_batch(torch.Generator().manual_seed(7), rows=6)
    src[4:, 3:] = 1  # two shorter sentences: padding (pad index 1), their eos moved
    src[4:, 3] = EOS
    return src, (src != 1).sum(1)


def searched(model: nn.Module, beam: int) -> list[list[tuple[list[int], float]]]:
    search = build_search(GenerationConfig(beam=beam, nbest=beam, max_len_a=1.0, max_len_b=4), SPECIALS)
    src, lengths = sources()
    with torch.inference_mode():
        found = search.search(EnsembleModel([model]), src, lengths)
    return [[(h.tokens.tolist(), h.score) for h in row] for row in found]


def test_the_plain_model_is_the_papers_code():
    model = plain_model()
    kinds = {type(m) for m in model.modules() if isinstance(m, (nn.Linear, nn.Dropout))}
    assert kinds == {nn.Linear, nn.Dropout}
    assert model.decoder.output_projection is None  # F.linear with output_weight
    reached = {t for module, targets in import_graph().items() if module.startswith("nmt.models") for t in targets}
    assert not [t for t in reached if t.startswith("nmt.cpu_speed")]


def test_the_seam_keeps_parameters_state_dict_mode_and_random_state():
    model = plain_model()
    before = model.state_dict()
    params = list(model.parameters())
    linears = sum(type(m) is nn.Linear for m in model.modules())
    dropouts = [m.p for m in model.modules() if type(m) is nn.Dropout]
    rng = torch.get_rng_state()
    assert swap_layers(model) is model
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))  # an optimizer's tensors
    after = model.state_dict()
    assert list(after) == list(before)
    assert all(after[k].data_ptr() == before[k].data_ptr() and torch.equal(after[k], before[k]) for k in before)
    assert sum(type(m) is BucketedLinear for m in model.modules()) == linears
    assert [m.p for m in model.modules() if type(m) is LaneDropout] == dropouts
    assert not any(type(m) in (nn.Linear, nn.Dropout) for m in model.modules())
    assert not any(m.training for m in model.modules())  # eval stays eval
    assert isinstance(model.decoder.output_projection, BucketedProjection)
    assert model.output_matrix() is model.decoder.output_weight  # the loss may still do the product itself
    layers = list(model.modules())
    swap_layers(model)  # a second call changes nothing
    assert all(a is b for a, b in zip(model.modules(), layers, strict=True))


def test_fp32_outputs_are_identical_with_and_without_the_seam(trained_state):
    plain, swapped = plain_model(trained_state), swap_layers(plain_model(trained_state))
    src, lengths = sources()
    prev = torch.cat([torch.full((6, 1), BOS), src[:, :-1]], 1)
    with torch.inference_mode():
        assert torch.equal(swapped(src, lengths, prev), plain(src, lengths, prev))
    for beam in (1, 3):
        hypotheses = searched(plain, beam)
        assert searched(swapped, beam) == hypotheses  # tokens and scores, through the decoding cache
        assert any(len(row[0][0]) > 2 for row in hypotheses)


def test_the_lane_mask_draws_from_the_default_generator(trained_state):
    model = swap_layers(plain_model(trained_state)).train()
    src, lengths = sources()
    prev = torch.cat([torch.full((6, 1), BOS), src[:, :-1]], 1)
    outs = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        outs.append(model(src, lengths, prev))
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2])


@needs_onednn
def test_packed_fp32_weights_translate_the_same(trained_state):
    """oneDNN's fp32 kernels on packed weights round differently from MKL's on the plain matrix: logits agree to
    about 1e-6, and the hypotheses are the same."""
    plain, packed = plain_model(trained_state), for_inference(plain_model(trained_state), bf16=False)
    assert isinstance(packed.decoder.output_projection, PackedProjection)
    assert all(m.packed is not None for m in packed.modules() if isinstance(m, BucketedLinear))
    assert packed.output_matrix() is None  # a packed copy does not follow the weights: no training through it
    assert set(packed.state_dict()) == set(trained_state)
    src, lengths = sources()
    prev = torch.cat([torch.full((6, 1), BOS), src[:, :-1]], 1)
    with torch.inference_mode():
        torch.testing.assert_close(packed(src, lengths, prev), plain(src, lengths, prev), rtol=1e-5, atol=1e-5)
    for beam in (1, 3):
        want, got = searched(plain, beam), searched(packed, beam)
        assert [[tokens for tokens, _ in row] for row in got] == [[tokens for tokens, _ in row] for row in want]
        for row_got, row_want in zip(got, want):
            assert [score for _, score in row_got] == pytest.approx([score for _, score in row_want], abs=1e-4)


def test_translating_loads_plain_models_and_applies_the_seam(tmp_path):
    from nmt.checkpoint.format import load_checkpoint
    from nmt.config.generate import InferenceConfig
    from nmt.data.data_bin import open_data_dir
    from nmt.generation.loading import load_ensemble, load_inference_models
    from test_generate_setup import make_checkpoint, make_data_bin

    data_bin = make_data_bin(tmp_path, n_test=3)
    path = str(make_checkpoint(data_bin, tmp_path / "m.pt"))
    data = open_data_dir(str(data_bin), None, None)
    (loaded,) = load_ensemble(path, data.src_dict, data.tgt_dict).models
    assert not any(isinstance(m, (BucketedLinear, LaneDropout)) for m in loaded.modules())
    (model,) = load_inference_models(InferenceConfig(path=path, threads=1), data).models
    assert sum(isinstance(m, BucketedLinear) for m in model.modules()) > 0
    assert all(isinstance(m, LaneDropout) for m in model.modules() if isinstance(m, nn.Dropout))
    assert set(model.state_dict()) == set(load_checkpoint(path)["model"])
