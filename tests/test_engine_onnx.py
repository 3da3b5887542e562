"""The ONNX engine (nmt.engines.onnx_export, nmt.engines.onnx_runtime): exported and run by onnxruntime, a model
translates as the torch step does (greedy >= 99.5%, beam 5 >= 99% identical hypotheses, the issue's bar; these tiny
models give 100%), for every plugin layout; what the export writes; a user plugin without the step, a plugin whose
graph fixed a size while tracing, a damaged engine.json and a missing onnxruntime are refused in one line, and a
refused export leaves no file behind. The int8 graphs (--onnx-precision both) translate close to fp32, and a folder
without them names the option that adds them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("onnxruntime")

from engine_models import LAYOUTS, copy_batch, outputs, recorded_search, trained_tiny  # noqa: E402
from fake_dictionary import FakeDict  # noqa: E402
from nmt.engines.member import torch_member  # noqa: E402
from nmt.engines.onnx_export import export_onnx  # noqa: E402
from nmt.engines.onnx_runtime import ONE_THREAD_TOKENS, OnnxGraph, SmallOnOneThread, load_onnx_member  # noqa: E402
from nmt.errors import DataError, NmtError, UsageError  # noqa: E402
from nmt.models import build_model  # noqa: E402
from nmt.plugins.attention.scaled_dot_product import ScaledDotProductAttention  # noqa: E402
from nmt.registry import register_attention  # noqa: E402
from test_model_transformer import tiny  # noqa: E402

GREEDY = {"search": {"name": "greedy"}, "beam": 1}
BEAM5 = {"beam": 5}


def identical_share(model, member, src, lengths, options) -> float:
    """The share of sentences whose best hypothesis ``member`` finds as the torch step does; their first steps'
    log-probs agree to 1e-4 (later ones may follow other beams where a hypothesis differs)."""
    ref, ref_steps = recorded_search(torch_member(model), src, lengths, **options)
    got, got_steps = recorded_search(member, src, lengths, **options)
    torch.testing.assert_close(got_steps[0], ref_steps[0], atol=1e-4, rtol=0)
    return sum(a[0] == b[0] for a, b in zip(outputs(ref), outputs(got))) / len(ref)


def test_export_writes_two_graphs_and_their_record_and_runs(tmp_path):
    model = tiny().float()
    folder = export_onnx(model, tmp_path / "onnx")
    assert sorted(p.name for p in folder.iterdir()) == ["decoder_step.onnx", "encoder.onnx", "engine.json"]
    record = json.loads((folder / "engine.json").read_text())
    assert record["engine"] == "onnxruntime" and record["layers"] == 2 and record["shares_encoder_rows"] is True
    assert record["decoder_step"]["inputs"][:3] == ["tokens", "positions", "encoder_padding"]
    member = load_onnx_member(tmp_path, threads=1)  # the model folder holding onnx/ also loads
    src, lengths = copy_batch(4, seed=1)
    hyps, steps = recorded_search(member, src, lengths, beam=2, max_len_b=4)
    assert len(hyps) == 4 and steps[0].shape == (4, 32)


def test_int8_graphs_translate_close_to_the_fp32_step(tmp_path):
    model = trained_tiny("scaled_dot_product", "sinusoidal")
    folder = export_onnx(model, tmp_path / "onnx", int8=True)
    assert sorted(p.name for p in folder.iterdir()) == ["decoder_step.int8.onnx", "decoder_step.onnx",
                                                        "encoder.int8.onnx", "encoder.onnx", "engine.json"]
    record = json.loads((folder / "engine.json").read_text())
    assert record["int8"] == {"encoder": {"file": "encoder.int8.onnx"},
                              "decoder_step": {"file": "decoder_step.int8.onnx"}}
    src, lengths = copy_batch(200, seed=11)
    ref, ref_steps = recorded_search(torch_member(model), src, lengths, **GREEDY)
    got, got_steps = recorded_search(load_onnx_member(tmp_path, threads=1, int8=True), src, lengths, **GREEDY)
    first = (got_steps[0] - ref_steps[0]).abs().max()
    assert 1e-4 < first < 0.25  # int8 weights: rounded, not fp32's arithmetic, yet close (observed about 0.06)
    assert sum(a[0] == b[0] for a, b in zip(outputs(ref), outputs(got))) >= 0.85 * len(ref)  # observed 0.95


def test_int8_runs_of_a_few_tokens_take_one_thread(tmp_path):
    """A lone sentence's int8 encoder pass and steps run on one thread (SmallOnOneThread); batches on the
    session's threads; with one thread asked for, there is nothing to choose."""
    calls: list[str] = []
    graph = SmallOnOneThread(lambda t: calls.append("one") or [], lambda t: calls.append("threads") or [])
    for tokens in (torch.zeros(1, ONE_THREAD_TOKENS), torch.zeros(3, 5), torch.zeros(1, ONE_THREAD_TOKENS + 1),
                   torch.zeros(64, 5)):
        graph([tokens])
    assert calls == ["one", "one", "threads", "threads"]
    export_onnx(tiny().float(), tmp_path / "onnx", int8=True)
    assert isinstance(load_onnx_member(tmp_path, threads=2, int8=True)._step, SmallOnOneThread)
    assert isinstance(load_onnx_member(tmp_path, threads=1, int8=True)._step, OnnxGraph)
    assert isinstance(load_onnx_member(tmp_path, threads=2)._step, OnnxGraph)  # fp32 shares its products well


def test_without_int8_graphs_quantize_int8_names_the_option_that_adds_them(tmp_path):
    export_onnx(tiny().float(), tmp_path / "onnx")
    with pytest.raises(UsageError, match="no int8 ONNX graphs; add them with nmt-export .* --onnx-precision both"):
        load_onnx_member(tmp_path, threads=1, int8=True)


@pytest.mark.slow
@pytest.mark.parametrize("attention,positional,options", LAYOUTS, ids=[f"{a}-{p}-{len(o)}" for a, p, o in LAYOUTS])
def test_onnxruntime_translates_as_the_torch_step(tmp_path, attention, positional, options):
    model = trained_tiny(attention, positional, **options)
    member = load_onnx_member(export_onnx(model, tmp_path / "onnx"), threads=1)
    src, lengths = copy_batch(200, seed=11)  # the bars on 200 sentences: one greedy, two beam misses allowed
    assert identical_share(model, member, src, lengths, GREEDY) >= 0.995
    assert identical_share(model, member, src, lengths, BEAM5) >= 0.99


def test_a_user_plugin_without_the_step_is_refused_and_nothing_is_written(tmp_path):
    plugin = Path(__file__).resolve().parent.parent / "examples" / "my_plugins" / "multiplicative_attention.py"
    from nmt.plugin_loader import import_user_dir, load_plugins

    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "multiplicative.py").write_text(plugin.read_text(encoding="utf-8"))
    load_plugins()
    import_user_dir(tmp_path / "plugins")
    model = build_model({"encoder_embed_dim": 16, "decoder_embed_dim": 16, "encoder_attention_heads": 2,
                         "decoder_attention_heads": 2, "encoder_ffn_embed_dim": 32, "decoder_ffn_embed_dim": 32,
                         "encoder_layers": 1, "decoder_layers": 1, "encoder_attention": {"name": "multiplicative"}},
                        FakeDict(24), FakeDict(32))
    with pytest.raises(UsageError, match="^--with onnx/compiled: the encoder attention plugin 'multiplicative'") as e:
        export_onnx(model, tmp_path / "onnx")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "onnx").exists()


def test_a_plugin_whose_graph_fixed_a_size_is_refused_at_export(tmp_path):
    """A plugin that says it is exportable but reads a size as a Python number: the traced graph holds the traced
    size, the check on other sizes finds it, and the files written so far are removed."""

    @register_attention("fixes_its_length")
    class FixesItsLength(ScaledDotProductAttention):
        def step_attend(self, q, k, v, key_padding_mask):
            return super().step_attend(q, k, v, key_padding_mask) * float(k.size(2))

    model = tiny(cross_attention="fixes_its_length").float()
    with pytest.raises(NmtError, match="the ONNX (encoder|decoder step) (differs|fails|gives)") as e:
        export_onnx(model, tmp_path / "onnx")
    assert "\n" not in str(e.value) and "--engine torch" in str(e.value)
    assert list((tmp_path / "onnx").iterdir()) == []


def test_a_damaged_record_is_refused_in_one_line(tmp_path):
    folder = export_onnx(tiny().float(), tmp_path / "onnx")
    (folder / "engine.json").write_text('{"engine": "onnxruntime", "format_version": 1')
    with pytest.raises(DataError, match=r"engine\.json: not readable .*--with onnx --force"):
        load_onnx_member(folder, threads=1)
    (folder / "engine.json").write_text(json.dumps({"engine": "onnxruntime", "format_version": 99}))
    with pytest.raises(DataError, match="format 99 is not one this nmt reads"):
        load_onnx_member(folder, threads=1)
    (folder / "engine.json").unlink()
    with pytest.raises(DataError, match="engine.json: missing"):
        load_onnx_member(folder, threads=1)


def test_without_onnxruntime_the_engine_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime raises ImportError
    with pytest.raises(UsageError, match=r"--engine onnxruntime needs .*pip install 'nmt\[onnx\]'"):
        load_onnx_member(tmp_path, threads=1)
    with pytest.raises(UsageError, match=r"nmt-export --with onnx needs"):
        export_onnx(tiny().float(), tmp_path / "onnx")
