"""Forced terms through a real nmt-serve: the native API's ``constraints`` (one list per sentence), ``ordered`` and
``glossary``, the server's --glossary on both routes, the answer naming each translation's phrases and those it
lacks, and a 400 JSON error naming the sentence for what cannot be forced, after which the server still answers;
the page's terms field sends them. A tiny random model: the search puts the phrases in."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from served_model import http, serve
from test_generate_setup import make_checkpoint, make_data_bin
from test_serve_page import browser  # noqa: F401  (the headless Chromium fixture)

pytestmark = pytest.mark.slow  # a real server process

LIMITS = ["--beam", "3", "--max-len-a", "0", "--max-len-b", "12", "--threads", "1"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Iterator[tuple[Any, Any]]:
    from nmt.data.text_pipeline import load_text_pipeline

    folder = tmp_path_factory.mktemp("constraints_serve")
    data_bin = make_data_bin(folder, n_test=2)
    ckpt = make_checkpoint(data_bin, folder / "a.pt", seed=3)
    glossary = folder / "terms.tsv"
    glossary.write_text("red house\tRED HOUSE\n", encoding="utf-8")
    pipeline = load_text_pipeline(data_bin, "de")
    for server in serve([str(data_bin), "--path", str(ckpt), "--glossary", str(glossary), *LIMITS]):
        yield server, pipeline


def holds(pipeline: Any, tokens: list[str], phrase: str) -> int:
    want = pipeline.encode(phrase).split()
    return next((i for i in range(len(tokens) - len(want) + 1) if tokens[i:i + len(want)] == want), -1)


def translate(server: Any, **body: Any) -> tuple[int, Any]:
    status, answer, _ = http(server.base + "/v1/translate", body)
    return status, answer


def test_constraints_and_glossaries_are_forced_and_reported(setup):
    server, pipeline = setup
    status, answer = translate(server, text=["the cat sat on the mat.", "a red house!", " "],
                               constraints=[["DOG", "SMALL CAT"], [], ["CAT"]], ordered=True,
                               glossary={"mat": "BIG TREE"}, nbest=2)
    assert status == 200, answer
    first, second, blank = answer["translations"]
    assert first["constraints"] == ["DOG", "SMALL CAT", "BIG TREE"] and first["unmet_constraints"] == []
    for hyp in first["hypotheses"]:
        assert 0 <= holds(pipeline, hyp["tokens"], "DOG") < holds(pipeline, hyp["tokens"], "SMALL CAT")
        assert holds(pipeline, hyp["tokens"], "BIG TREE") > holds(pipeline, hyp["tokens"], "SMALL CAT")
    assert second["constraints"] == ["RED HOUSE"] and second["unmet_constraints"] == []  # the server's --glossary
    assert holds(pipeline, second["hypotheses"][0]["tokens"], "RED HOUSE") >= 0
    assert blank["hypotheses"][0]["text"] == "" and blank["unmet_constraints"] == ["CAT"]

    status, plain = translate(server, text=["a big cat."])
    assert status == 200 and "constraints" not in plain["translations"][0]  # nothing forced: the answer as before
    status, onmt, _ = http(server.base + "/translate", [{"src": "a red house!", "id": 100}])
    assert status == 200 and onmt[0][0]["tgt"] == second["hypotheses"][0]["text"]


@pytest.mark.parametrize("body, message", [
    ({"constraints": [["CAT"]]}, "constraints: 1 lists for 2 sentences; give one list of target phrases per "
                                 "sentence ([] for none)"),
    ({"constraints": [[], [""]]}, "constraints[1]: an empty constraint; give the target words to force"),
    ({"constraints": [["ZEBRA"], []]}, "constraints[0]: constraint 'ZEBRA': its piece(s) 'Z@@', 'E@@', 'B@@', 'R@@' "
                                       "are not in the target dictionary"),
    ({"constraints": [["RED HOUSE SMALL CAT DOG BIG TREE"], []]}, "constraints[0]: the constraints need "),
    ({"glossary": {"cat": ""}}, "glossary['cat']: an empty target term"),
    ({"constraints": "CAT"}, "constraints: Input should be a valid list"),
])
def test_bad_constraints_are_a_400_naming_the_sentence(setup, body, message):
    server, _ = setup
    status, answer = translate(server, text=["the cat sat.", "a dog."], **body)
    assert status == 400 and answer["status"] == "error", answer
    assert answer["error"].startswith(message) and "\n" not in answer["error"], answer
    assert http(server.base + "/health")[0] == 200


def test_the_page_sends_its_terms_and_shows_them(setup, browser):  # noqa: F811 (the fixture imported above)
    from test_serve_page import Page

    server, _ = setup
    sentences = ["the cat sat.", "a red house!"]
    status, answer = translate(server, text=sentences, beam=3, nbest=1, constraints=[["DOG"], ["DOG"]],
                               glossary={"cat": "SMALL CAT"})
    assert status == 200, answer
    page = Page(browser, server.url + "/")
    page.tab.fill("#terms", "cat = SMALL CAT\n\nDOG\n")
    page.translate("\n".join(sentences), beam=3)
    assert page.tab.is_hidden("#error")
    assert page.texts("#translations .hypothesis.best .text") == [
        t["hypotheses"][0]["text"] for t in answer["translations"]]
    assert page.texts("#translations .terms") == ["terms: DOG, SMALL CAT", "terms: DOG, RED HOUSE"]
    assert page.tab.locator("#translations .unmet").count() == 0
    page.tab.fill("#terms", "ZEBRA")
    page.translate(sentences[0], beam=3)
    assert page.tab.is_visible("#error") and "constraint 'ZEBRA'" in page.tab.text_content("#error")
    page.close(server.url)
