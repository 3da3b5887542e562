"""--quantize int8|fp16: the models' linear layers and output projection run as dynamic-quantized ones
(nmt.generation.quantize), through nmt-generate and nmt.load alike; it refuses --bf16 in one line."""

from __future__ import annotations

import pytest
import torch

import nmt
from model_folder_setup import detokenized
from nmt.cli.generate import main as generate_main
from nmt.generation.quantize import PackedLinear
from test_generate_setup import call_cli

KINDS = {"int8": torch.qint8, "fp16": torch.float16}


@pytest.fixture(scope="module")
def fp32(exported_model):
    before = torch.get_num_threads()
    yield nmt.load(exported_model.folder, threads=1)
    torch.set_num_threads(before)


@pytest.fixture(scope="module", params=list(KINDS))
def quantized(exported_model, request):
    before = torch.get_num_threads()
    yield request.param, nmt.load(exported_model.folder, quantize=request.param, threads=1)
    torch.set_num_threads(before)


def test_every_linear_layer_and_the_output_projection_are_quantized(fp32, quantized):
    kind, loaded = quantized
    model = loaded.ens.models[0]
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert isinstance(model.decoder.output_projection, PackedLinear)
    dynamic = [m for m in model.modules() if isinstance(m, PackedLinear)]
    assert len(dynamic) == sum(isinstance(m, torch.nn.Linear) for m in fp32.ens.models[0].modules()) + 1
    assert {m.dtype for m in dynamic} == {KINDS[kind]}  # what the packed weights hold
    # the embeddings stay fp32 and equal to the float model's
    assert torch.equal(model.decoder.embed_tokens.weight, fp32.ens.models[0].decoder.embed_tokens.weight)


def test_quantized_log_probabilities_stay_close_to_fp32(fp32, quantized):
    kind, loaded = quantized
    src = fp32.encode("a b c d").unsqueeze(0)  # (1, S)
    lengths = torch.tensor([src.size(1)])
    prev = torch.tensor([[fp32.data.tgt_dict.eos()]])
    with torch.inference_mode():
        lp = [torch.log_softmax(m.ens.models[0](src, lengths, prev)[0, -1], -1) for m in (fp32, loaded)]  # (V,)
    assert not torch.equal(lp[0], lp[1])  # the quantized products really ran
    gap = (lp[0].exp() - lp[1].exp()).abs().sum()
    assert gap < {"int8": 0.05, "fp16": 0.002}[kind]  # the distributions nearly agree; fp16 weights more closely


def test_nmt_generate_and_the_api_translate_alike(exported_model, quantized, capsys):
    kind, loaded = quantized
    sentences = (exported_model.raw / "test.en").read_text(encoding="utf-8").splitlines()
    capsys.readouterr()
    assert call_cli(generate_main, [exported_model.data, "--path", str(exported_model.folder), "--threads", "1",
                                    "--quantize", kind]) == 0
    expected = detokenized(capsys.readouterr().out)
    assert loaded.translate(sentences) == [expected[i] for i in range(len(sentences))]


@pytest.mark.parametrize("kind", list(KINDS))
def test_quantize_with_bf16_is_one_line(exported_model, kind, capsys):
    capsys.readouterr()
    assert call_cli(generate_main, [exported_model.data, "--path", str(exported_model.folder), "--quantize", kind,
                                    "--bf16"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"nmt-generate: error: --bf16 and --quantize {kind}: choose one ({kind} weights replace the fp32 "
                   "ones)")


@pytest.mark.skipif("qnnpack" not in torch.backends.quantized.supported_engines, reason="no qnnpack engine here")
def test_fp16_without_fbgemm_is_one_line(exported_model, monkeypatch, capsys):
    monkeypatch.setattr(torch.backends.quantized, "engine", "qnnpack")  # as on an ARM CPU
    capsys.readouterr()
    assert call_cli(generate_main, [exported_model.data, "--path", str(exported_model.folder), "--quantize",
                                    "fp16"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("nmt-generate: error: --quantize fp16: needs fbgemm's kernels (x86 CPUs), and this torch uses "
                   "'qnnpack'; use --quantize int8 or leave it out")
