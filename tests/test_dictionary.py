"""Dictionary: special indices, frequency order, padding, file round-trip, encode/decode."""

from collections import Counter

import numpy as np
import pytest

from nmt.data.dictionary import Dictionary
from nmt.errors import DataError


def make(counts: dict, **kw) -> Dictionary:
    return Dictionary.from_counts(Counter(counts), **kw)


def test_specials_come_first_with_fixed_indices():
    d = make({"a": 3})
    assert d.symbols[:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert (d.bos(), d.pad(), d.eos(), d.unk()) == (0, 1, 2, 3)
    assert d.index("a") == 4 and d.index("never-seen") == d.unk()


def test_symbols_sorted_by_count_then_text_and_padded_to_multiple_of_8():
    d = make({"b": 2, "a": 2, "c": 5, "d": 1, "e": 1})
    assert d.symbols[4:9] == ["c", "a", "b", "d", "e"]  # ties broken by text, not by corpus order
    assert len(d) == 16 and d.symbols[-1].startswith("madeupword")


def test_threshold_and_nwords_limit_the_vocabulary():
    counts = {"x": 10, "y": 5, "z": 1}
    assert "z" not in make(counts, threshold=2) and "y" in make(counts, threshold=2)
    top1 = make(counts, nwords=5)  # as in fairseq, the 4 specials count
    assert "x" in top1 and "y" not in top1


def test_save_load_round_trip_is_identical(tmp_path):
    d = make({w: i + 1 for i, w in enumerate("the quick brown fox jumps ü 中".split())})
    d.save(tmp_path / "dict.txt")
    lines = (tmp_path / "dict.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "中 7" and all(len(ln.split(" ")) == 2 for ln in lines)
    loaded = Dictionary.load(tmp_path / "dict.txt")
    assert loaded.symbols == d.symbols and loaded.counts == d.counts
    assert loaded.fingerprint() == d.fingerprint() and loaded == d


def test_fingerprint_changes_with_the_symbols():
    assert make({"a": 1}).fingerprint() != make({"b": 1}).fingerprint()


def test_encode_and_string_round_trip():
    d = make({"hel@@": 1, "lo": 1, "world": 1})
    ids = d.encode_ids("hel@@ lo  world unknown")
    assert ids.dtype == np.int64 and ids[-1] == d.eos() and ids[3] == d.unk()
    assert d.string(ids) == "hel@@ lo world <unk>"
    assert d.string(ids, bpe_symbol="@@ ") == "hello world <unk>"
    assert d.string([d.bos(), *ids[:2], d.eos(), 5]) == "hel@@ lo"  # skips bos, stops at eos
    tensor = d.encode_line("world", append_eos=False)
    assert tensor.tolist() == [d.index("world")]


def test_dtype_is_the_smallest_that_fits():
    assert make({str(i): 1 for i in range(100)}).dtype() == np.uint8
    assert make({str(i): 1 for i in range(300)}).dtype() == np.uint16
    assert make({str(i): 1 for i in range(70000)}).dtype() == np.uint32


def test_load_reports_file_and_line_of_a_bad_entry(tmp_path):
    (tmp_path / "dict.txt").write_text("a 1\nbroken\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"dict.txt, line 2"):
        Dictionary.load(tmp_path / "dict.txt")
    with pytest.raises(DataError, match="no such dictionary"):
        Dictionary.load(tmp_path / "missing.txt")
