"""The request contract, through the real Python API (nmt.load of a trained model folder) and a real nmt-serve
process on it: every search option has a type (never converted) and a range, checked in one place
(nmt.generation.search_options) for both; min_len may not stretch outputs past max_len_a/max_len_b or the model's
positions; lenpen/unkpen/temperature are bounded so no score overflows; a sentence that is not text, a body nested
too deep and an unknown field are refused naming where; an empty or whitespace-only sentence translates to "".
Every refusal is one line (a UsageError, or a 4xx JSON answer after which the server still answers)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import nmt
from nmt.cli.generate import main as generate_main
from nmt.cli.interactive import main as interactive_main
from nmt.errors import ConfigError, UsageError
from served_model import http, serve
from test_generate_setup import call_cli, one_error_line

SENTENCES = ["the cat sat on the mat.", "a dog!"]


@pytest.fixture(scope="module")
def model(exported_model):
    return nmt.load(exported_model.folder, threads=1)


def refused(call, error: type, *needles: str) -> str:
    """The one-line message of the ``error`` that ``call()`` raises; each of ``needles`` must be in it."""
    with pytest.raises(error) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message and all(n in message for n in needles), message
    return message


# --------------------------------------------------------------------------- the Python API

@pytest.mark.parametrize("options, needles", [
    ({"min_len": 1_000_000}, ["--min-len 1000000", "at most 200"]),  # ran every output to the model's positions
    ({"min_len": 6, "max_len_b": 5}, ["--min-len 6", "at most 5"]),
    ({"lenpen": 1e308}, ["--lenpen", "[-5, 5]"]),  # a bare OverflowError
    ({"lenpen": -1e308}, ["--lenpen", "[-5, 5]"]),  # a score of -inf
    ({"unkpen": -1e308}, ["--unkpen", "[-100, 100]"]),
    ({"lenpen": 10**400}, ["lenpen", "finite"]),  # an integer no float holds
    ({"search": {"name": "sampling", "temperature": 1e308}}, ["--temperature", "[0.01, 100]"]),
])
def test_search_options_out_of_range_are_one_line_config_errors(model, options, needles):
    refused(lambda: model.translate(SENTENCES, **options), ConfigError, *needles)


def test_min_len_up_to_the_length_limit_is_honoured(model):
    for hyp in (t.hypotheses[0] for t in model.translate_detailed(SENTENCES, min_len=4, max_len_b=4, beam=2)):
        assert len(hyp.tokens) == 4


@pytest.mark.parametrize("options, needles", [
    ({"beam": "5"}, ["beam '5'", "must be an integer, not str"]),
    ({"beam": True}, ["beam True", "not bool"]),
    ({"beam": 2.0}, ["beam 2.0", "not float"]),
    ({"lenpen": "1.0"}, ["lenpen '1.0'", "must be a number"]),
    ({"alignment": "yes"}, ["alignment 'yes'", "true or false"]),
    ({"max_tokens": True}, ["max_tokens True"]),
    ({"search": {"name": "sampling", "temperature": "0.5"}}, ["search.temperature '0.5'", "must be a number"]),
    ({"search": 3}, ["search 3", "a search name"]),
])
def test_option_types_are_not_converted(model, options, needles):
    refused(lambda: model.translate(SENTENCES, **options), ConfigError, *needles)


def test_a_cached_check_is_not_reused_for_an_equal_value_of_another_type(model):
    assert model.translate(SENTENCES, beam=1) == model.translate(SENTENCES, beam=np.int64(1))
    refused(lambda: model.translate(SENTENCES, beam=True), ConfigError, "beam True")  # True == 1, a cached key


@pytest.mark.parametrize("sentences, needles", [
    (None, ["translate(): sentences is None", "list of strings"]),  # a bare TypeError
    (5, ["sentences is 5"]),
    (b"the cat", ["sentences is b'the cat'"]),
    (["the cat.", None], ["sentence 1 is a NoneType"]),
    (["the cat.", "a \ud800 dog"], ["sentence 1 holds a lone surrogate (U+D800) at character 2"]),
])
def test_sentences_that_are_not_text_are_usage_errors(model, sentences, needles):
    refused(lambda: model.translate(sentences), UsageError, *needles)
    if sentences is None:
        refused(lambda: model.translate_detailed(sentences), UsageError, "translate_detailed(): sentences is None")


def test_empty_and_whitespace_sentences_translate_to_the_empty_string(model):
    assert model.translate(["", "  \t ", SENTENCES[0], "\u3000"]) == ["", "", model.translate(SENTENCES[0]), ""]
    assert model.translate("") == ""
    blank, full = model.translate_detailed(["   ", SENTENCES[1]], nbest=2, beam=2, alignment=True, attention=True)
    assert blank.source == "   " and blank.source_tokens == [] and blank.attention is None
    assert [(h.text, h.tokens, h.score, h.positional_scores, h.alignment) for h in blank.hypotheses] == [
        ("", [], 0.0, [], [])]
    assert len(full.hypotheses) == 2 and full.attention is not None


def test_sampling_with_a_nucleus_below_float32_keeps_the_best_token(model):
    out = model.translate(SENTENCES, beam=2, search={"name": "sampling", "sampling_topp": 1e-300})
    assert all(out)  # was "sampling: the model gave non-finite probabilities"


def test_interactive_prints_an_empty_line_for_an_empty_line(model, exported_model, tmp_path, capsys):
    (tmp_path / "in.txt").write_text(f"{SENTENCES[0]}\n\n \t \n{SENTENCES[1]}\n", encoding="utf-8")
    assert call_cli(interactive_main, [exported_model.folder, "--input", tmp_path / "in.txt", "--threads", "1"]) == 0
    assert capsys.readouterr().out.split("\n") == [model.translate(SENTENCES[0]), "", "", model.translate(SENTENCES[1]),
                                                    ""]
    assert call_cli(interactive_main, [exported_model.folder, "--input", tmp_path / "in.txt", "--threads", "1",
                                       "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "S-1\t\nH-1\t0.0000\t\nD-1\t0.0000\t\nP-1\t\nS-2\t \t \nH-2\t0.0000\t\n" in out
    assert "D-3\t" in out and "H-0\t" in out


# --------------------------------------------------------------------------- nmt-generate shares the model rules

def test_generate_refuses_a_min_len_above_the_length_limit(exported_model, capsys):
    code = call_cli(generate_main, [exported_model.data, "--path", exported_model.pair[-1], "--max-len-b", "3",
                                    "--min-len", "4"])
    out, err = capsys.readouterr()
    one_error_line(err, "nmt-generate", "--min-len 4", "at most 3")
    assert code == 2 and "H-" not in out


# --------------------------------------------------------------------------- a real nmt-serve

@pytest.fixture(scope="module")
def server(exported_model):
    yield from serve([str(exported_model.folder), "--threads", "1", "--max-beam", "8"])


def ask(server, path: str, body, *, method: str = "POST") -> tuple[int, object]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, answer, headers = http(server.base + path, raw=raw, method=method)
    return status, answer


NATIVE = {"text": SENTENCES}
REFUSED = [
    ("min_len beyond the length limit", "/v1/translate", {**NATIVE, "min_len": 1_000_000}, "--min-len 1000000"),
    ("min_len above max_len_b", "/v1/translate", {**NATIVE, "min_len": 8, "max_len_b": 7}, "at most 7"),
    ("lenpen 1e308", "/v1/translate", {**NATIVE, "lenpen": 1e308}, "lenpen"),
    ("lenpen -1e308", "/v1/translate", {**NATIVE, "lenpen": -1e308}, "lenpen"),
    ("NaN", "/v1/translate", b'{"text": ["a dog!"], "lenpen": NaN}', "NaN is not a JSON number"),
    ("a number of 5,000 digits", "/v1/translate", b'{"text": ["a"], "beam": 1' + b"0" * 5000 + b"}", "digits"),
    ("100,000 nested arrays", "/translate", b"[" * 100_000 + b"]" * 100_000, "100000 levels deep"),
    ("100,000 nested objects", "/v1/translate", b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "levels deep"),
    ("lone surrogate (OpenNMT-py)", "/translate", b'[{"src": "a dog"}, {"src": "a \\ud800 dog"}]',
     "[1].src: holds a lone surrogate (U+D800) at character 2"),
    ("lone surrogate (native)", "/v1/translate", b'{"text": ["a \\udc00"]}', "text[0]: holds a lone surrogate"),
    ("lone surrogate in a key", "/v1/translate", b'{"text": ["a"], "\\ud800": 1}', "valid string"),
    ('"id": "100"', "/translate", [{"src": "a dog!", "id": "100"}], "[0].id: Input should be a valid integer"),
    ('"id": true', "/translate", [{"src": "a dog!", "id": True}], "[0].id: Input should be a valid integer, not a"),
    ('"beam": "5"', "/v1/translate", {**NATIVE, "beam": "5"}, "beam: Input should be a valid integer, not a string"),
    ('"beam": true', "/v1/translate", {**NATIVE, "beam": True}, "beam: Input should be a valid integer"),
    ('"beam": 2.0', "/v1/translate", {**NATIVE, "beam": 2.0}, "beam: Input should be a valid integer"),
    ('"attention": "yes"', "/v1/translate", {**NATIVE, "attention": "yes"}, "attention: Input should be a valid "
                                                                           "boolean"),
    ('"lenpen": "1"', "/v1/translate", {**NATIVE, "lenpen": "1"}, "lenpen: Input should be a valid number"),
    ("unknown field (OpenNMT-py)", "/translate", [{"src": "a dog!", "tgt_prefix": "Ein"}],
     "[0].tgt_prefix: unknown field; the fields are src, id"),
    ("OpenNMT-py's ref", "/translate", [{"src": "a dog!", "ref": "Ein"}], "[0].ref: unknown field"),
    ("unknown field (native)", "/v1/translate", {**NATIVE, "beamsize": 4}, "beamsize: unknown field"),
]


@pytest.mark.slow
@pytest.mark.parametrize("path, body, needle", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_bad_requests_are_400_and_the_server_goes_on(server, path, body, needle):
    status, answer = ask(server, path, body)
    assert status == 400, answer
    assert isinstance(answer, dict) and answer["status"] == "error" and needle in answer["error"], answer
    assert "\n" not in answer["error"]
    assert http(server.base + "/health")[0] == 200


@pytest.mark.slow
def test_valid_requests_with_the_same_values_are_answered(server):
    """The refusals above are of the values, not of the routes: the same requests with proper types pass."""
    assert ask(server, "/translate", [{"src": "a dog!", "id": 100}])[0] == 200
    status, answer = ask(server, "/v1/translate", {**NATIVE, "beam": 2, "lenpen": 1, "attention": False,
                                                   "min_len": 3, "max_len_b": 3})
    assert status == 200, answer
    assert all(len(t["hypotheses"][0]["tokens"]) == 3 for t in answer["translations"])
    nested_in_text = "[" * 100 + "]" * 100  # brackets inside a string do not nest
    assert ask(server, "/v1/translate", {"text": [nested_in_text]})[0] == 200


@pytest.mark.slow
def test_empty_and_whitespace_sentences_are_the_empty_string(server):
    status, answer = ask(server, "/translate", [{"src": ""}, {"src": " \t "}, {"src": SENTENCES[1]}])
    assert status == 200, answer
    assert [h["tgt"] for h in answer[0]] == ["", "", ask(server, "/translate", [{"src": SENTENCES[1]}])[1][0][0]["tgt"]]
    assert answer[0][0]["pred_score"] == 0.0
    status, answer = ask(server, "/v1/translate", {"text": ["   "], "alignment": True, "attention": True})
    assert status == 200, answer
    assert answer["translations"] == [{"source": "   ", "source_tokens": [], "hypotheses": [
        {"text": "", "tokens": [], "score": 0.0, "alignment": []}]}]


@pytest.mark.slow
def test_head_health_is_200(server):
    status, body, headers = http(server.base + "/health", method="HEAD")
    assert status == 200 and body == ""
