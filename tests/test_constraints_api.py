"""Forced terms from Python: ``translate(sentences, constraints=[[...], ...], ordered=...)`` and a glossary on
``nmt.load`` (a file or a mapping) or per call; each Translation names its phrases and those its best hypothesis
lacks; what cannot be forced is one UsageError line naming the sentence. A tiny random model: the search puts the
phrases in."""

from __future__ import annotations

import pytest
import torch

import nmt
from nmt.errors import ConfigError, DataError, UsageError
from test_generate_setup import make_checkpoint, make_data_bin

SENTENCES = ["the cat sat on the mat.", "a big red house!", "  "]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("constraints_api")
    data_bin = make_data_bin(folder, n_test=2)
    ckpt = make_checkpoint(data_bin, folder / "a.pt", seed=3)
    glossary = folder / "terms.tsv"
    glossary.write_text("cat\tSMALL CAT\nred house\tRED HOUSE\n", encoding="utf-8")
    before = torch.get_num_threads()
    model = nmt.load(ckpt, data=data_bin, threads=1, glossary=glossary)
    plain = nmt.load(ckpt, data=data_bin, threads=1)
    yield model, plain, data_bin, ckpt
    torch.set_num_threads(before)


def holds(model, tokens: list[str], phrase: str) -> int:
    want = model.terminology.encoder.pieces(phrase)
    return next((i for i in range(len(tokens) - len(want) + 1) if tokens[i:i + len(want)] == want), -1)


OPTIONS = dict(beam=3, max_len_a=0.0, max_len_b=12)


def test_each_sentence_gets_its_phrases(setup):
    _, plain, _, _ = setup
    before = plain.translate_detailed(SENTENCES, **OPTIONS)
    assert holds(plain, before[0].hypotheses[0].tokens, "RED HOUSE") < 0  # not there by itself
    found = plain.translate_detailed(SENTENCES, constraints=[["RED HOUSE", "DOG"], [], ["CAT"]], nbest=2, **OPTIONS)
    first = found[0]
    assert first.constraints == ["RED HOUSE", "DOG"] and first.unmet_constraints == []
    for hyp in first.hypotheses:
        assert all(holds(plain, hyp.tokens, p) >= 0 for p in ("RED HOUSE", "DOG")) and hyp.unmet_constraints == []
    assert found[1].constraints == [] and found[1].text == before[1].text  # no phrases: beam search's translation
    assert (found[2].text, found[2].constraints, found[2].unmet_constraints) == ("", ["CAT"], ["CAT"])  # not searched
    assert plain.translate(SENTENCES[0], constraints=["DOG"], **OPTIONS) == plain.translate(
        SENTENCES[:1], constraints=[["DOG"]], **OPTIONS)[0]  # one string: one list of phrases


def test_ordered_phrases_come_in_order(setup):
    _, plain, _, _ = setup
    for order in (["DOG", "RED HOUSE"], ["RED HOUSE", "DOG"]):
        tokens = plain.translate_detailed(SENTENCES[:1], constraints=[order], ordered=True, **OPTIONS)[0].hypotheses[
            0].tokens
        assert 0 <= holds(plain, tokens, order[0]) < holds(plain, tokens, order[1])


def test_the_glossary_of_load_and_of_a_call_apply_where_their_terms_occur(setup):
    model, plain, _, _ = setup
    found = model.translate_detailed(SENTENCES[:2], **OPTIONS)
    assert [t.constraints for t in found] == [["SMALL CAT"], ["RED HOUSE"]]
    assert holds(model, found[0].hypotheses[0].tokens, "SMALL CAT") >= 0
    assert holds(model, found[1].hypotheses[0].tokens, "RED HOUSE") >= 0
    more = model.translate_detailed(SENTENCES[:2], constraints=[["DOG"], []], glossary={"big": "BIG TREE"},
                                    **OPTIONS)
    assert [t.constraints for t in more] == [["DOG", "SMALL CAT"], ["BIG TREE", "RED HOUSE"]]
    assert plain.translate_detailed(SENTENCES[1:2], glossary={"Big": "BIG TREE"}, **OPTIONS)[0].constraints == [
        "BIG TREE"]


@pytest.mark.parametrize("call, error, message", [
    (dict(constraints=[["CAT"]]), UsageError, "translate(): constraints: 1 lists for 3 sentences; give one list"),
    (dict(constraints="CAT"), UsageError, "translate(): constraints: a str; give one list of target phrases"),
    (dict(constraints=[[], "CAT", []]), UsageError, "translate(): constraints of sentence 1: constraints are a list "
                                                    "of target phrases, not a str"),
    (dict(constraints=[[], [" "], []]), UsageError, "translate(): constraints of sentence 1: an empty constraint"),
    (dict(constraints=[[], [3], []]), UsageError, "translate(): constraints of sentence 1: a constraint is a int"),
    (dict(constraints=[["ZEBRA"], [], []]), UsageError,
     "translate(): constraints of sentence 0: constraint 'ZEBRA': its piece(s) 'Z@@', 'E@@', 'B@@', 'R@@' are not in"),
    (dict(constraints=[["RED HOUSE", "SMALL CAT"], [], []], max_len_b=3), UsageError,
     "translate(): constraints of sentence 0: the constraints need "),
    (dict(constraints=[["CAT"], [], []], search={"name": "sampling"}), UsageError,
     "translate(search={'name': 'sampling'}): cannot force terms"),
    (dict(constraints=[["CAT"], [], []], search={"name": "beam"}), UsageError,
     "translate(search={'name': 'beam'}): cannot force terms"),
    (dict(constraints=[["CAT"], [], []], ordered="yes"), ConfigError, "translate(): ordered 'yes': must be true or"),
    (dict(glossary={"zebra": "ZEBRA"}), UsageError, "glossary['zebra']: constraint 'ZEBRA': its piece(s)"),
])
def test_what_cannot_be_forced_is_one_line(setup, call, error, message):
    _, plain, _, _ = setup
    options = {**OPTIONS, **call}
    with pytest.raises(error) as e:
        plain.translate(SENTENCES, **options)
    assert str(e.value).startswith(message) and "\n" not in str(e.value), str(e.value)


def test_a_bad_glossary_fails_load_naming_its_line(setup, tmp_path):
    _, _, data_bin, ckpt = setup
    bad = tmp_path / "bad.tsv"
    bad.write_text("cat\tCAT\nhouse\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{bad}:2: no tab;"):
        nmt.load(ckpt, data=data_bin, threads=1, glossary=bad)
