"""nmt.load(...).translate: raw text in, the same translations nmt-generate prints out (a model folder, or a
checkpoint + data-bin), the detailed form's hypotheses, alignments and attention, and one-line errors."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import nmt
from model_folder_setup import detokenized
from nmt.cli.generate import main as generate_main
from nmt.errors import ConfigError, DataError, NmtError, UsageError
from test_generate_setup import call_cli

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "python_api.py"


@pytest.fixture(scope="module")
def models(exported_model):
    """The folder, and the checkpoint + data-bin it was exported from, loaded once."""
    before = torch.get_num_threads()
    folder = nmt.load(exported_model.folder, threads=1)
    checkpoint = nmt.load(exported_model.pair[-1], data=exported_model.data, threads=1)
    yield folder, checkpoint
    torch.set_num_threads(before)  # threads=1 is torch's setting for the whole process


def raw_test(exported_model) -> list[str]:
    return (exported_model.raw / "test.en").read_text(encoding="utf-8").splitlines()


def generate(exported_model, capsys, *options: str) -> str:
    capsys.readouterr()
    assert call_cli(generate_main, [exported_model.data, "--path", exported_model.pair[-1], "--threads", "1",
                                    *options]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("beam", [5, 1])
def test_translations_are_nmt_generate_d_lines(exported_model, models, capsys, beam):
    expected = detokenized(generate(exported_model, capsys, "--beam", str(beam)))
    sentences = raw_test(exported_model)
    assert len(expected) == len(sentences) == 9
    for model in models:
        assert model.translate(sentences, beam=beam) == [expected[i] for i in range(len(sentences))]
    assert models[0].translate(sentences[3], beam=beam) == expected[3]  # one string in, one string out


def test_an_ensemble_of_the_folder_with_itself_translates_like_the_folder(exported_model, models):
    sentences = raw_test(exported_model)[:4]
    ensemble = nmt.load(f"{exported_model.folder}:{exported_model.folder}", threads=1)
    assert ensemble.translate(sentences) == models[0].translate(sentences)


def test_detailed_hypotheses_are_sorted_and_consistent(exported_model, models, capsys):
    out = generate(exported_model, capsys, "--beam", "4", "--nbest", "2")
    sentences = raw_test(exported_model)
    detailed = models[0].translate_detailed(sentences, beam=4, nbest=2)
    assert [t.source for t in detailed] == sentences
    h_scores = [float(m.group(2)) for m in re.finditer(r"^H-(\d+)\t(\S+)\t", out, re.M) if m.group(1) == "0"]
    for k, translation in enumerate(detailed):
        hyps = translation.hypotheses
        assert len(hyps) == 2 and hyps[0].score >= hyps[1].score
        assert translation.text == hyps[0].text
        assert translation.source_tokens == models[0].tokenize(sentences[k])
        for hyp in hyps:
            assert len(hyp.positional_scores) == len(hyp.tokens) + 1  # </s> is scored, not shown
            assert all(s <= 0 for s in hyp.positional_scores)
            assert hyp.alignment is None
    # nmt-generate prints the scores in base 2; the API gives natural logarithms
    assert [round(h.score / math.log(2), 4) for h in detailed[0].hypotheses] == h_scores


def test_alignment_pairs_and_attention_weights(exported_model, models):
    sentences = raw_test(exported_model)[:3]
    model = models[0]
    decoder_layers = int(model.ens.models[0].cfg.decoder_layers)
    heads = int(model.ens.models[0].cfg.decoder_attention_heads)
    for translation in model.translate_detailed(sentences, alignment=True, attention=True, beam=3):
        best = translation.hypotheses[0]
        source, target = len(translation.source_tokens), len(best.tokens)
        assert best.alignment is not None and len(best.alignment) == target
        assert all(0 <= s < source and 0 <= t < target for s, t in best.alignment)
        weights = translation.attention
        assert weights is not None and weights.shape == (decoder_layers, heads, target + 1, source + 1)
        assert torch.allclose(weights.sum(-1), torch.ones(decoder_layers, heads, target + 1), atol=1e-5)
    assert model.translate_detailed(sentences[:1])[0].attention is None  # only on request


@pytest.mark.parametrize("options, error, needle", [
    ({"beam": 0}, ConfigError, "beam"),
    ({"beam": 2, "nbest": 3}, ConfigError, "--nbest 3"),
    ({"bean": 5}, UsageError, "unknown option(s) bean"),
    ({"search": "nope"}, ConfigError, "nope"),
    ({"lenpen": "high"}, ConfigError, "high"),
    ({"max_tokens": 0}, ConfigError, "max-tokens"),
])
def test_bad_options_are_one_line_errors(models, options, error, needle):
    with pytest.raises(error) as caught:
        models[0].translate(["the cat sat."], **options)
    message = str(caught.value)
    assert needle in message and "\n" not in message


def test_bad_sentences_are_named(models):
    model = models[0]
    with pytest.raises(DataError, match=r"^sentence 1: \d+ source tokens .* split the sentence$"):
        model.translate(["the cat.", "cat " * (model.max_source_positions + 5)])
    with pytest.raises(UsageError, match="sentence 1 is a NoneType"):
        model.translate(["the cat.", None])
    with pytest.raises(UsageError, match="list of sentences"):
        model.translate_detailed("the cat.")
    assert model.translate([]) == []
    assert model.translate(s for s in ["the cat.", "a dog."]) == model.translate(["the cat.", "a dog."])


def test_a_checkpoint_without_its_data_bin_is_a_usage_error(exported_model, tmp_path):
    with pytest.raises(UsageError, match=r"data=<the data-bin it was trained on>"):
        nmt.load(exported_model.pair[-1])
    with pytest.raises(UsageError, match="no such checkpoint or model folder"):
        nmt.load(tmp_path / "missing.pt", data=exported_model.data)
    with pytest.raises(NmtError, match="dict.en.txt|metadata.json"):
        nmt.load(exported_model.pair[-1], data=tmp_path)  # an empty folder is not a data-bin


def test_the_example_script_runs(exported_model, models):
    done = subprocess.run([sys.executable, str(EXAMPLE), str(exported_model.folder), "the cat sat on the mat.",
                           "a big red house!"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    expected = models[0].translate(["the cat sat on the mat.", "a big red house!"], beam=5)
    assert lines[0].startswith("model: en -> de, ")
    assert lines[1] == f"translation: the cat sat on the mat. => {expected[0]}"
    assert lines[2] == f"translation: a big red house! => {expected[1]}"
    assert lines[3] == "source tokens: " + " ".join(models[0].tokenize("the cat sat on the mat."))
    assert lines[4].startswith("hypothesis 0: score ") and lines[5].startswith("hypothesis 1: score ")
    assert " | alignment " in lines[4]
    cfg = models[0].ens.models[0].cfg
    assert re.fullmatch(rf"attention shape: {cfg.decoder_layers} layers x {cfg.decoder_attention_heads} heads x "
                        r"\d+ target x 10 source tokens \(</s> included\)", lines[6]), lines[6]
