"""Scorers chosen by name (--scoring): bleu_lc_tok scores what the Multi30k papers score (lowercased,
punctuation-normalized, Moses-tokenized with -a, BLEU on the tokens), its signature names those steps, and
nmt-generate and nmt-validate print it beside sacreBLEU's detokenized figures."""

from __future__ import annotations

import math
import re

import pytest
from sacrebleu.metrics import BLEU

from nmt.cli.generate import main as generate_main
from nmt.cli.validate import main as validate_main
from nmt.errors import ConfigError
from nmt.registry import SCORER
from nmt.scoring import build_scorers, score_lines, scorer_names
from test_generate_setup import call_cli, make_checkpoint, make_data_bin

HYPOTHESES = ["Ein Mann fährt ein E-Bike.", "Zwei Hunde spielen im „Schnee“!", "Eine Frau, die lacht."]
REFERENCES = ["Ein Mann fährt auf einem E-Bike.", 'Zwei Hunde spielen im "Schnee" !', "Eine Frau lacht."]
# the same text as lowercase.perl | normalize-punctuation.perl -l de | tokenizer.perl -a -l de -no-escape leave it
HYPOTHESES_TOKENIZED = ["ein mann fährt ein e @-@ bike .", 'zwei hunde spielen im " schnee " !',
                        "eine frau , die lacht ."]
REFERENCES_TOKENIZED = ["ein mann fährt auf einem e @-@ bike .", 'zwei hunde spielen im " schnee " !',
                        "eine frau lacht ."]


def lc_tok():
    return SCORER.build("bleu_lc_tok", None, "de")


def test_each_sentence_is_lowercased_normalized_and_tokenized_as_the_papers_do():
    scorer = lc_tok()
    assert [scorer.prepare(h) for h in HYPOTHESES] == HYPOTHESES_TOKENIZED
    assert [scorer.prepare(r) for r in REFERENCES] == REFERENCES_TOKENIZED


def test_bleu_lc_tok_is_bleu_of_the_tokens():
    [score] = lc_tok().score(HYPOTHESES, REFERENCES)
    expected = BLEU(tokenize="none").corpus_score(HYPOTHESES_TOKENIZED, [REFERENCES_TOKENIZED])
    assert score.value == pytest.approx(expected.score, abs=1e-9)
    assert score.text.startswith(f"BLEU (lc-tok) = {expected.score:.2f} ")
    # and by hand, n-grams matched of n-grams in the hypotheses, sentence by sentence: the first matches 7 of its
    # 8 tokens ("ein" once), then 5/7 bigrams, 3/6 trigrams ("ein mann fährt", "e @-@ bike", "@-@ bike ."), 1/5
    # four-grams; the second is its reference (8/8, 7/7, 6/6, 5/5); the third 4/6, 2/5 ("eine frau", "lacht ."), 0, 0
    precisions = [(7 + 8 + 4) / 22, (5 + 7 + 2) / 19, (3 + 6 + 0) / 16, (1 + 5 + 0) / 13]
    brevity = 1.0  # 22 hypothesis tokens for 21 reference tokens
    by_hand = brevity * 100 * math.prod(precisions) ** 0.25
    assert score.value == pytest.approx(by_hand, abs=1e-9)
    cased = BLEU().corpus_score(HYPOTHESES, [REFERENCES]).score  # the detokenized, cased scale differs here
    assert abs(cased - score.value) > 1.0


def test_the_signature_names_every_step():
    [score] = lc_tok().score(HYPOTHESES, REFERENCES)
    assert score.label == "bleu_lc_tok signature"
    assert re.fullmatch(r"bleu_lc_tok\|lc\|punct-norm:de\|moses-tok-a:de\|sacremoses:[\d.]+\|nrefs:1\|case:lc\|"
                        r"eff:no\|tok:none\|smooth:exp\|version:[\d.]+", score.signature), score.signature


def test_sacrebleu_comes_first_and_unknown_names_are_refused():
    assert scorer_names("") == ["sacrebleu"]
    assert scorer_names("bleu_lc_tok,sacrebleu, bleu_lc_tok") == ["sacrebleu", "bleu_lc_tok"]
    with pytest.raises(ConfigError, match='unknown scorer "bleu_lc" for --scoring; choices: bleu_lc_tok, sacrebleu.'
                                          ' Did you mean "bleu_lc_tok"'):
        scorer_names("bleu_lc")
    lines = score_lines(build_scorers("bleu_lc_tok", "de"), HYPOTHESES, REFERENCES, "Generate test", "refs.de")
    assert [line.split(":")[0] for line in lines] == [
        "Generate test", "sacreBLEU signature", "Generate test", "sacreBLEU chrF signature",
        "Generate test", "bleu_lc_tok signature"]
    assert lines[1].endswith("(detokenized, against refs.de)") and lines[5].endswith("(against refs.de)")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scoring")
    data_bin = make_data_bin(folder, n_test=9)
    return data_bin, make_checkpoint(data_bin, folder / "a.pt", seed=0)


def run(main, capsys, *argv) -> str:
    code = call_cli(main, [str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_nmt_generate_and_nmt_validate_print_both_scales(model, capsys):
    data_bin, checkpoint = model
    search = ["--beam", "2", "--max-len-a", "1", "--max-len-b", "5"]
    plain = run(generate_main, capsys, data_bin, "--path", checkpoint, "--quiet", *search)
    assert "BLEU (lc-tok)" not in plain and "bleu_lc_tok" not in plain  # sacreBLEU alone by default
    out = run(generate_main, capsys, data_bin, "--path", checkpoint, *search, "--scoring", "bleu_lc_tok")
    hyps = dict(re.findall(r"^D-(\d+)\t[^\t]*\t(.*)$", out, re.M))
    refs = (data_bin / "raw" / "test.de").read_text(encoding="utf-8").splitlines()
    [expected] = lc_tok().score([hyps[str(i)] for i in range(len(refs))], refs)
    summary = [line for line in out.splitlines() if line.startswith("Generate test with beam=2: ")]
    assert [line.split(": ", 1)[1].split(" =")[0] for line in summary] == ["BLEU", "chrF2", "BLEU (lc-tok)"]
    assert summary[2] == f"Generate test with beam=2: {expected.text}"
    assert f"bleu_lc_tok signature: {expected.signature} (against {data_bin / 'raw' / 'test.de'})" in out

    scored = run(validate_main, capsys, data_bin, "--path", checkpoint, "--valid-subset", "test", *search,
                 "--scoring", "bleu_lc_tok")
    lines = scored.splitlines()
    assert lines[0].startswith("valid on 'test' subset | loss ")
    assert lines[1:] == [line.replace("Generate test with beam=2", "Validate test with beam=2, a.pt")
                         for line in out.splitlines() if "BLEU" in line or "chrF2" in line or "signature" in line]
