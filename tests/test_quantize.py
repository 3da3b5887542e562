"""--quantize int8: the models' linear layers and output projection run as int8 dynamic-quantized ones
(nmt.generation.quantize), through nmt-generate and nmt.load alike; it refuses --bf16 in one line."""

from __future__ import annotations

import pytest
import torch
from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

import nmt
from model_folder_setup import detokenized
from nmt.cli.generate import main as generate_main
from test_generate_setup import call_cli


@pytest.fixture(scope="module")
def both(exported_model):
    before = torch.get_num_threads()
    yield nmt.load(exported_model.folder, threads=1), nmt.load(exported_model.folder, quantize="int8", threads=1)
    torch.set_num_threads(before)


def test_every_linear_layer_and_the_output_projection_are_int8(both):
    fp32, int8 = both
    model = int8.ens.models[0]
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    assert isinstance(model.decoder.output_projection, DynamicInt8Linear)
    assert sum(isinstance(m, DynamicInt8Linear) for m in model.modules()) == sum(
        isinstance(m, torch.nn.Linear) for m in fp32.ens.models[0].modules()) + 1
    # the embeddings stay fp32 and equal to the float model's
    assert torch.equal(model.decoder.embed_tokens.weight, fp32.ens.models[0].decoder.embed_tokens.weight)


def test_int8_log_probabilities_stay_close_to_fp32(both):
    fp32, int8 = both
    src = fp32.encode("a b c d").unsqueeze(0)  # (1, S)
    lengths = torch.tensor([src.size(1)])
    prev = torch.tensor([[fp32.data.tgt_dict.eos()]])
    with torch.inference_mode():
        lp = [torch.log_softmax(m.ens.models[0](src, lengths, prev)[0, -1], -1) for m in (fp32, int8)]  # (V,)
    assert not torch.equal(lp[0], lp[1])  # int8 really ran
    assert (lp[0].exp() - lp[1].exp()).abs().sum() < 0.05  # the distributions nearly agree


def test_nmt_generate_and_the_api_translate_alike_in_int8(exported_model, both, capsys):
    sentences = (exported_model.raw / "test.en").read_text(encoding="utf-8").splitlines()
    capsys.readouterr()
    assert call_cli(generate_main, [exported_model.data, "--path", str(exported_model.folder), "--threads", "1",
                                    "--quantize", "int8"]) == 0
    expected = detokenized(capsys.readouterr().out)
    assert both[1].translate(sentences) == [expected[i] for i in range(len(sentences))]


def test_int8_with_bf16_is_one_line(exported_model, capsys):
    capsys.readouterr()
    assert call_cli(generate_main, [exported_model.data, "--path", str(exported_model.folder), "--quantize", "int8",
                                    "--bf16"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "nmt-generate: error: --bf16 and --quantize int8: choose one (int8 weights replace the fp32 ones)"
