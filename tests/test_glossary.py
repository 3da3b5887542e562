"""--glossary FILE: entries read and checked (a bad line is one line naming FILE:LINE), applied where their source
term occurs in a sentence (tokenized words, any case, whole words, the longest term first, each target term once)
and merged with the phrases given with the sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt.errors import DataError, UsageError
from nmt.generation.glossary import match_form
from nmt.generation.terminology import Terminology
from test_generate_setup import make_data_bin

GLOSSARY = """\
# source term<TAB>target term; '#' lines and blank lines are skipped

cat\tCAT
red house\tRED HOUSE
house\tHOUSE
Big\tBIG
the mat\tMAT
dog's\tDOG
"""


@pytest.fixture(scope="module")
def terminology(tmp_path_factory) -> Terminology:
    from nmt.data.data_bin import open_data_dir

    data = make_data_bin(tmp_path_factory.mktemp("glossary"), n_test=2)
    return Terminology.of(open_data_dir(str(data), None, None))


def write(folder: Path, text: str, name: str = "terms.tsv") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def targets(terminology: Terminology, glossary_path: Path, sentence: str) -> list[str]:
    glossary = terminology.read(glossary_path)
    assert glossary is not None
    return [target for target, _ in glossary.find(terminology.words(sentence))]


def test_entries_apply_where_their_source_terms_occur(terminology, tmp_path):
    path = write(tmp_path, GLOSSARY)
    assert len(terminology.read(path)) == 6
    assert targets(terminology, path, "The CAT sat.") == ["CAT"]  # any case; Moses split the full stop
    assert targets(terminology, path, "a big red house!") == ["BIG", "RED HOUSE"]  # longest first, in order
    assert targets(terminology, path, "a house, a red house and a cat, a house") == ["HOUSE", "RED HOUSE", "CAT"]
    assert targets(terminology, path, "cats and a category") == []  # whole words only
    assert targets(terminology, path, "on the mat") == ["MAT"]  # a term of several words
    assert targets(terminology, path, "the dog's mat") == ["DOG"]  # tokenized like the sentence: dog 's


def test_punctuation_stuck_to_a_word_does_not_hide_it():
    assert match_form("House.") == "house" and match_form("«Haus»") == "haus" and match_form("...") == "..."


def test_glossary_terms_join_the_given_phrases_once(terminology, tmp_path):
    terminology = Terminology(terminology.encoder, terminology.source, terminology.data,
                              terminology.read(write(tmp_path, GLOSSARY)))
    terms = terminology.terms(terminology.words("a cat in a red house"), ["SAT", "CAT"], "line 1")
    assert terms is not None and terms.texts == ("SAT", "CAT", "RED HOUSE")
    extra = terminology.read({"sat": "RAN"}, "glossary")
    terms = terminology.terms(terminology.words("the cat sat"), [], "line 1", glossary=extra)
    assert terms is not None and terms.texts == ("CAT", "RAN")
    assert terminology.terms(terminology.words("a tree"), [], "line 1") is None


@pytest.mark.parametrize("line, problem", [
    ("cat CAT", "no tab; write one entry per line: source term, one tab, target term"),
    ("cat\tCAT\tKATZE", "2 tabs; write one entry per line: source term, one tab, target term"),
    ("  \tCAT", "an empty source term; write 'source term<TAB>target term'"),
    ("cat\t ", "an empty target term; write 'source term<TAB>target term'"),
    ("zebra\tZEBRA", "constraint 'ZEBRA': its piece(s) 'Z@@', 'E@@', 'B@@', 'R@@' are not in the target dictionary"),
    ("house\tMAT", "source term 'house' already has the target term 'HOUSE' (FILE:5); keep one target term per "
                   "source term"),
])
def test_a_bad_line_is_one_line_naming_file_and_line(terminology, tmp_path, line, problem):
    path = write(tmp_path, GLOSSARY.replace("dog's\tDOG\n", f"{line}\n"))
    with pytest.raises(DataError) as e:
        terminology.read(path)
    message = str(e.value)
    assert message.startswith(f"{path}:8: {problem.replace('FILE', str(path))}"), message
    assert "\n" not in message


def test_the_same_entry_twice_and_windows_line_ends_are_fine(terminology, tmp_path):
    path = write(tmp_path, "cat\tCAT\r\nCat\tCAT\r\n")
    assert targets(terminology, path, "a cat") == ["CAT"]


def test_a_missing_empty_or_undecodable_file_is_one_line(terminology, tmp_path):
    with pytest.raises(UsageError, match=r"^--glossary .*nowhere.tsv: no such file; give a file of"):
        terminology.read(tmp_path / "nowhere.tsv")
    with pytest.raises(DataError, match=r"empty.tsv: no glossary entries;"):
        terminology.read(write(tmp_path, "# nothing yet\n\n", "empty.tsv"))
    latin1 = tmp_path / "latin1.tsv"
    latin1.write_bytes("cat\tCAT\nm\xe4t\tMAT\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1.tsv.*line 2"):
        terminology.read(latin1)


def test_a_mapping_is_checked_as_a_file_is(terminology):
    assert [t for t, _ in terminology.read({"red house": "RED HOUSE"}).find(["a", "Red", "House"])] == ["RED HOUSE"]
    with pytest.raises(UsageError, match=r"^glossary\['zebra'\]: constraint 'ZEBRA': its piece\(s\)"):
        terminology.read({"zebra": "ZEBRA"})
    with pytest.raises(UsageError, match=r"^glossary\['cat'\]: a int; source and target terms are strings"):
        terminology.read({"cat": 3})
    with pytest.raises(UsageError, match=r"^glossary: a list, not a mapping"):
        terminology.read(["cat"])  # type: ignore[arg-type]
