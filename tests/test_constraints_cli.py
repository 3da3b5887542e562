"""Forced terms through the commands: nmt-interactive reads fairseq's ``source<TAB>phrase<TAB>phrase`` lines with
--constraints [ordered|unordered], both commands take --glossary, nmt-generate a --constraints-file for a binarized
split; the translations contain the phrases, an unmet one is named on stderr, and bad constraints are one error
line with nothing translated. The model is a tiny random one: the search, not the model, puts the phrases in."""

from __future__ import annotations

import re

import pytest

from nmt.cli.generate import main as generate_main
from nmt.cli.interactive import main as interactive_main
from test_generate_setup import call_cli, make_checkpoint, make_data_bin, one_error_line

LIMITS = ["--beam", "3", "--max-len-a", "0", "--max-len-b", "12", "--threads", "1"]
GLOSSARY = "# source term<TAB>target term\ncat\tCAT\nred house\tRED HOUSE\n"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("constraints_cli")
    data_bin = make_data_bin(folder, n_test=4)
    return folder, data_bin, make_checkpoint(data_bin, folder / "a.pt", seed=3)


def interactive(setup, tmp_path, capsys, lines: list[str], *flags: str) -> tuple[int, str, str]:
    _, data_bin, ckpt = setup
    source = tmp_path / "in.txt"
    source.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    capsys.readouterr()
    code = call_cli(interactive_main, [data_bin, "--path", ckpt, "--input", source, *LIMITS, *flags])
    out, err = capsys.readouterr()
    return code, out, err


def pieces(setup, text: str) -> list[str]:
    """``text`` tokenized and BPE'd like the target side."""
    from nmt.data.text_pipeline import load_text_pipeline

    return load_text_pipeline(setup[1], "de").encode(text).split()


def holds(setup, tokens: str, phrase: str) -> int:
    """Where the model tokens ``tokens`` (an H- line's) hold ``phrase``'s pieces in a row (-1: nowhere)."""
    have, want = tokens.split(), pieces(setup, phrase)
    return next((i for i in range(len(have) - len(want) + 1) if have[i:i + len(want)] == want), -1)


def hypotheses(out: str) -> dict[int, str]:
    """Sentence id -> the model tokens of its best hypothesis (H- lines)."""
    found: dict[int, str] = {}
    for sid, tokens in re.findall(r"^H-(\d+)\t[^\t]*\t(.*)$", out, re.M):
        found.setdefault(int(sid), tokens)
    return found


def test_tab_separated_phrases_are_in_the_translations(setup, tmp_path, capsys):
    lines = ["the cat sat on the mat.\tRED HOUSE\tDOG", "a big tree!\tSMALL CAT"]
    code, plain, _ = interactive(setup, tmp_path, capsys, [line.split("\t")[0] for line in lines], "--verbose")
    assert code == 0
    plain_hyps = hypotheses(plain)
    assert holds(setup, plain_hyps[0], "RED HOUSE") < 0 and holds(setup, plain_hyps[1], "SMALL CAT") < 0
    code, out, err = interactive(setup, tmp_path, capsys, lines, "--constraints", "--verbose")
    assert code == 0, err
    found = hypotheses(out)
    assert all(holds(setup, found[0], p) >= 0 for p in ("RED HOUSE", "DOG"))
    assert holds(setup, found[1], "SMALL CAT") >= 0
    assert "not met" not in err
    assert [line for line in out.splitlines() if line[:4] in ("S-0\t", "C-0\t")] == [
        "S-0\tthe cat sat on the mat.", "C-0\tRED HOUSE", "C-0\tDOG"]
    code, brief, _ = interactive(setup, tmp_path, capsys, lines, "--constraints")  # without --verbose: one line each
    assert brief.splitlines() == re.findall(r"^D-\d+\t[^\t]*\t(.*)$", out, re.M)


def test_ordered_phrases_come_in_the_order_given(setup, tmp_path, capsys):
    for order in (["DOG", "RED HOUSE"], ["RED HOUSE", "DOG"]):
        code, out, err = interactive(setup, tmp_path, capsys, ["the cat sat on the mat.\t" + "\t".join(order)],
                                     "--constraints", "ordered", "--verbose")
        assert code == 0, err
        tokens = hypotheses(out)[0]
        assert 0 <= holds(setup, tokens, order[0]) < holds(setup, tokens, order[1])


def test_glossary_terms_are_forced_where_their_source_terms_occur(setup, tmp_path, capsys):
    glossary = tmp_path / "terms.tsv"
    glossary.write_text(GLOSSARY, encoding="utf-8")
    code, out, err = interactive(setup, tmp_path, capsys, ["The Cat sat on a red house!", "a big tree."],
                                 "--glossary", glossary, "--verbose")
    assert code == 0, err
    found = hypotheses(out)
    assert holds(setup, found[0], "CAT") >= 0 and holds(setup, found[0], "RED HOUSE") >= 0
    assert re.findall(r"^C-(\d)\t(.*)$", out, re.M) == [("0", "CAT"), ("0", "RED HOUSE")]  # none for line 2


def test_a_sentence_with_nothing_to_translate_names_its_unmet_phrases(setup, tmp_path, capsys):
    code, out, err = interactive(setup, tmp_path, capsys, ["a cat.\tCAT", "\tDOG"], "--constraints")
    assert code == 0, err
    assert out.splitlines()[1] == ""
    assert err.splitlines()[0] == (f"warning: {tmp_path / 'in.txt'}: line 2: 1 of 1 constraint(s) not met: 'DOG' "
                                   "(they did not fit the output length limit, or their order; raise --max-len-b "
                                   "or check the constraints)")


@pytest.mark.parametrize("line, flags, needles", [
    ("a cat.\t\tCAT", ["--constraints"], ["in.txt: line 2: an empty constraint; give the target words"]),
    ("a cat.\tZEBRA", ["--constraints"], ["in.txt: line 2: constraint 'ZEBRA': its piece(s) 'Z@@', 'E@@', 'B@@', "
                                          "'R@@' are not in the target dictionary", "<unk>"]),
    ("a cat.\tRED HOUSE\tSMALL CAT", ["--constraints", "--max-len-b", "4"],
     ["in.txt: line 2: the constraints need ", " target tokens, more than the 4 the output may have"]),
    ("a cat.\tCAT", ["--constraints", "--search", "sampling"], ["--search sampling: cannot force terms"]),
    ("a cat.\tCAT", ["--constraints", "--search", "beam"], ["--search beam: cannot force terms"]),
    ("a cat.", ["--constraints", "sorted"], ["--constraints 'sorted'", "ordered, unordered"]),
])
def test_bad_constraints_are_one_line_and_nothing_is_translated(setup, tmp_path, capsys, line, flags, needles):
    code, out, err = interactive(setup, tmp_path, capsys, ["the cat sat.\tCAT", line], *flags)
    assert code == 2 and out == ""
    one_error_line(err, "nmt-interactive", *needles)


def test_a_bad_glossary_line_stops_before_the_models_load(setup, tmp_path, capsys):
    glossary = tmp_path / "terms.tsv"
    glossary.write_text(GLOSSARY + "house HOUSE\n", encoding="utf-8")
    code, out, err = interactive(setup, tmp_path, capsys, ["a house."], "--glossary", glossary, "--path", "nowhere.pt")
    assert code == 1 and out == ""
    one_error_line(err, "nmt-interactive", f"{glossary}:4: no tab; write one entry per line")


def generate(setup, capsys, *flags: object) -> tuple[int, str, str]:
    _, data_bin, ckpt = setup
    capsys.readouterr()
    code = call_cli(generate_main, [data_bin, "--path", ckpt, *LIMITS, *flags])
    out, err = capsys.readouterr()
    return code, out, err


def test_generate_forces_a_constraints_file_and_the_glossary(setup, tmp_path, capsys):
    folder, _, _ = setup
    sources = (folder / "test.en").read_text(encoding="utf-8").splitlines()
    phrases = tmp_path / "phrases.txt"
    phrases.write_text("RED HOUSE\tDOG\n\nSMALL CAT\n\n", encoding="utf-8")
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("Cat\tMAT\n", encoding="utf-8")
    code, out, err = generate(setup, capsys, "--constraints-file", phrases, "--glossary", glossary)
    assert code == 0, err
    best = hypotheses(out)
    forced = {0: ["RED HOUSE", "DOG"], 2: ["SMALL CAT"]}
    for sid, source in enumerate(sources):  # the glossary matches the binarized source's words, any case
        if "cat" in re.findall(r"\w+", source.lower()):
            forced[sid] = forced.get(sid, []) + ["MAT"]
    assert len(forced) > 2
    for sid, wanted in forced.items():
        assert all(holds(setup, best[sid], p) >= 0 for p in wanted), (sid, best[sid])
    phrases_in_all = sum(len(ps) for ps in forced.values())
    assert (f"constraints: {phrases_in_all} of {phrases_in_all} phrases met; 0 of {len(forced)} constrained "
            "sentences miss some") in out
    assert sorted((int(s), p) for s, p in re.findall(r"^C-(\d+)\t(.*)$", out, re.M)) == sorted(
        (sid, p) for sid, ps in forced.items() for p in ps)


@pytest.mark.parametrize("flags, needles", [
    (["--constraints"], ["--constraints: nmt-generate reads the phrases", "--constraints-file FILE"]),
    (["--constraints-file", "{tmp}/two.txt"], ["two.txt: 2 lines, but split test has 4 sentences"]),
    (["--constraints-file", "{tmp}/none.txt"], ["--constraints-file", "none.txt: no such file"]),
    (["--glossary", "{tmp}/two.txt", "--workers", "2"], ["--workers 2: worker processes do not force terms"]),
])
def test_generate_refuses_what_it_cannot_force_in_one_line(setup, tmp_path, capsys, flags, needles):
    (tmp_path / "two.txt").write_text("CAT\n\tDOG\n", encoding="utf-8")
    code, out, err = generate(setup, capsys, *[f.format(tmp=tmp_path) for f in flags])
    assert code in (1, 2) and "D-" not in out
    one_error_line(err, "nmt-generate", *needles)
