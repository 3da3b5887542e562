"""The functional decoder step (nmt.engines.step) and the ensemble member engines give searches
(nmt.engines.member): for every attention and positional plugin layout, greedy and beam searches over the step
take the eager decoder's log-probabilities at every step (allclose 1e-5) and find its hypotheses; the flat
signature's shapes (rows grouped by sentence, a window plugin's capped cache); a user plugin that does not
implement the step is refused in one line naming it; torch.export traces the step with every size dynamic."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine_models import LAYOUTS, copy_batch, outputs, recorded_search, trained_tiny
from fake_dictionary import FakeDict
from nmt.engines.member import torch_member
from nmt.engines.step import DecoderStep, EncoderForExport, check_exportable, step_names
from nmt.errors import UsageError
from nmt.models import build_model
from nmt.plugin_loader import import_user_dir, load_plugins
from test_model_transformer import tiny

GREEDY = {"search": {"name": "greedy"}, "beam": 1}
BEAM = {"beam": 4}


def assert_same_search(model, src, lengths, options):
    """The member's search takes the eager model's steps (same count, log-probs allclose 1e-5) and outputs."""
    eager, eager_steps = recorded_search(model, src, lengths, **options)
    stepped, step_steps = recorded_search(torch_member(model), src, lengths, **options)
    assert outputs(stepped) == outputs(eager)
    assert len(step_steps) == len(eager_steps) > 1
    for a, b in zip(step_steps, eager_steps):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_step_gives_the_eager_log_probs_at_every_step_greedy_and_beam():
    model = trained_tiny("scaled_dot_product", "sinusoidal", updates=40)
    src, lengths = copy_batch(8, seed=3)
    assert_same_search(model, src, lengths, GREEDY)
    assert_same_search(model, src, lengths, BEAM)


@pytest.mark.slow
@pytest.mark.parametrize("attention,positional,options", LAYOUTS, ids=[f"{a}-{p}-{len(o)}" for a, p, o in LAYOUTS])
def test_every_plugin_layout_steps_as_the_eager_decoder(attention, positional, options):
    model = trained_tiny(attention, positional, **options)
    src, lengths = copy_batch(16, seed=5)
    for search in (GREEDY, BEAM):
        assert_same_search(model, src, lengths, search)


@pytest.mark.parametrize("attention,kept", [("scaled_dot_product", 7), ("restricted", 3)])
def test_flat_signature_shapes(attention, kept):
    """Rows grouped by sentence (b, G), the cache growing by one, restricted attention keeping r + 1 = 3."""
    model = tiny(attention=attention).float()
    encoder, step = EncoderForExport(model), DecoderStep(model)
    src = torch.randint(4, 24, (2, 5))
    with torch.no_grad():
        out, padding, *cross = encoder(src)
        assert out.shape == (2, 5, 16) and padding.dtype == torch.bool and len(cross) == 2 * 2
        cache = []
        for i in range(2):
            cache += [torch.randn(2, 3, 2, 6, 8), torch.randn(2, 3, 2, 6, 8), cross[2 * i], cross[2 * i + 1]]
        log_probs, *new = step(torch.randint(4, 32, (2, 3)), torch.full((2, 3), 6), padding, *cache)
    inputs, names_out = step_names(2)
    assert len(inputs) == 3 + 4 * 2 and len(names_out) == 1 + len(new) == 5
    assert log_probs.shape == (2, 3, 32) and log_probs.dtype == torch.float32
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(2, 3))
    assert all(t.shape == (2, 3, 2, kept, 8) for t in new)


def test_a_user_plugin_without_the_step_is_refused_in_one_line(tmp_path):
    plugin = Path(__file__).resolve().parent.parent / "examples" / "my_plugins" / "multiplicative_attention.py"
    (tmp_path / "multiplicative.py").write_text(plugin.read_text(encoding="utf-8"))
    load_plugins()
    import_user_dir(tmp_path)
    model = build_model({"encoder_embed_dim": 16, "decoder_embed_dim": 16, "encoder_attention_heads": 2,
                         "decoder_attention_heads": 2, "encoder_ffn_embed_dim": 32, "decoder_ffn_embed_dim": 32,
                         "encoder_layers": 1, "decoder_layers": 1, "decoder_attention": {"name": "multiplicative"}},
                        FakeDict(24), FakeDict(32))
    with pytest.raises(UsageError) as refused:
        check_exportable(model)
    message = str(refused.value)
    assert "\n" not in message
    assert "decoder attention plugin 'multiplicative'" in message and "MultiplicativeAttention" in message
    assert "step_attend" in message and "exportable = True" in message and "--engine torch" in message
    with pytest.raises(UsageError):
        DecoderStep(model)


def test_the_member_refuses_attention_weights_in_one_line():
    model = tiny().float()
    member = torch_member(model)
    enc = member.encoder(torch.randint(4, 24, (2, 4)))
    with pytest.raises(UsageError, match="no attention weights.*--engine torch"):
        member.decoder(torch.zeros(2, 1, dtype=torch.long), enc, member.new_incremental_state(), need_weights=True)


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["scaled_dot_product", "restricted"])
def test_torch_export_traces_the_step_with_every_size_dynamic(attention):
    """What the compiled engine exports: one trace serves greedy (G = 1) and beams, the first step (t = 0) and
    later ones, one sentence or many, and gives the module's outputs."""
    from torch.export import Dim, export

    model = tiny(attention=attention).float()
    encoder, step = EncoderForExport(model), DecoderStep(model)

    def inputs(b, group, t, seed):
        g = torch.Generator().manual_seed(seed)
        _, padding, *cross = encoder(torch.randint(4, 24, (b, 3 + seed), generator=g))
        cache = []
        for i in range(2):
            cache += [torch.randn(b, group, 2, t, 8, generator=g), torch.randn(b, group, 2, t, 8, generator=g),
                      cross[2 * i], cross[2 * i + 1]]
        return (torch.randint(4, 32, (b, group), generator=g), torch.full((b, group), t), padding, *cache)

    b, group, source, t = Dim("b"), Dim("G"), Dim("S"), Dim("t", min=0)
    cache_dims = tuple(d for _ in range(2) for d in ({0: b, 1: group, 3: t}, {0: b, 1: group, 3: t},
                                                     {0: b, 2: source}, {0: b, 2: source}))
    with torch.no_grad():
        program = export(step, inputs(2, 3, 4, 0), dynamic_shapes=({0: b, 1: group}, {0: b, 1: group},
                                                                   {0: b, 1: source}, cache_dims))
        for case in ((3, 1, 0), (1, 1, 0), (2, 5, 1), (4, 5, 9)):
            args = inputs(*case, seed=1)
            for want, got in zip(step(*args), program.module()(*args)):
                torch.testing.assert_close(got, want)


def recorded_stream(member: object, batches, monkeypatch) -> tuple[dict, list[torch.Tensor], int]:
    """Greedy search over ``batches`` refilling finished rows as early as it may: {sentence id: tokens}, every step's
    log-probabilities and how many merges happened."""
    import nmt.generation.search as search_module
    from nmt.config.generate import GenerationConfig
    from nmt.generation.ensemble import EnsembleModel
    from nmt.generation.search import build_search
    from test_search_toy_models import SPECIALS

    monkeypatch.setattr(search_module, "REFILL_AT", 0.9)
    ens = EnsembleModel([member])
    steps: list[torch.Tensor] = []
    merges = []
    plain_step, plain_merge = ens.step, ens.merge

    def step(*args, **kwargs):
        lprobs, attn = plain_step(*args, **kwargs)
        steps.append(lprobs.clone())
        return lprobs, attn

    def merge(*args, **kwargs):
        merges.append(1)
        return plain_merge(*args, **kwargs)

    ens.step, ens.merge = step, merge  # type: ignore[method-assign]
    search = build_search(GenerationConfig(max_len_a=1.5, max_len_b=3, **GREEDY), SPECIALS)
    found = {i: [h.tokens.tolist() for h in hyps] for i, hyps in search.search_stream(ens, batches)}
    return found, steps, len(merges)


@pytest.mark.parametrize("attention,positional", [("scaled_dot_product", "sinusoidal"), ("relative", "none")])
def test_rows_that_joined_later_step_as_in_the_eager_decoder(attention, positional, monkeypatch):
    """A refilled greedy search merges new sentences into the running rows (left pads): over the step, with each
    row's position telling it which cached keys are not its own, it takes the eager decoder's steps and outputs."""
    model = trained_tiny(attention, positional, updates=40)
    src, lengths = copy_batch(12, seed=7, min_len=1, max_len=9)
    batches = [(list(range(i, i + 3)), src[i:i + 3], lengths[i:i + 3]) for i in range(0, 12, 3)]
    eager, eager_steps, eager_merges = recorded_stream(model, batches, monkeypatch)
    stepped, step_steps, step_merges = recorded_stream(torch_member(model), batches, monkeypatch)
    assert step_merges == eager_merges > 0
    assert stepped == eager
    assert len(step_steps) == len(eager_steps)
    for a, b in zip(step_steps, eager_steps):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_rows_are_merged_only_when_the_export_masks_left_pads():
    """Restricted attention keeps a window of its own (no right-aligned cache), and an export whose record does not
    say ``merges_rows`` (made before the step masked left pads) never has its rows merged."""
    from nmt.engines.member import StepMember
    from nmt.generation.ensemble import EnsembleModel

    assert EnsembleModel([torch_member(tiny().float())]).can_merge
    assert not EnsembleModel([torch_member(tiny(attention="restricted").float())]).can_merge
    plain = torch_member(tiny().float())
    older = StepMember(plain.cfg, plain._encode, plain._step, shares_encoder_rows=True, engine="compiled")
    assert not EnsembleModel([older]).can_merge
