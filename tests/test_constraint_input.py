"""Constraints as users give them: fairseq's tab-separated input, raw phrases tokenized and BPE'd like the target
side and mapped to its dictionary, the one-line refusals (empty phrase, piece outside the dictionary, longer than
the output may be), the search they choose, and which phrases an output lacks."""

from __future__ import annotations

import pytest
import torch

from nmt.config.generate import GenerationConfig
from nmt.errors import UsageError
from nmt.generation.constraint_input import (
    check_fits,
    make_terms,
    output_limit,
    split_line,
    unmet_phrases,
    with_constrained_search,
)
from nmt.generation.search import length_limits
from nmt.generation.terminology import Terminology
from test_generate_setup import make_data_bin


@pytest.fixture(scope="module")
def terminology(tmp_path_factory) -> Terminology:
    """The terminology of a tiny data-bin: Moses + subword-nmt BPE, the target side upper-cased words."""
    from nmt.data.data_bin import open_data_dir

    data = make_data_bin(tmp_path_factory.mktemp("constraint_input"), n_test=2)
    return Terminology.of(open_data_dir(str(data), None, None))


def ids(terminology: Terminology, pieces: str) -> list[int]:
    return [terminology.data.tgt_dict.index(p) for p in pieces.split()]


def test_fairseq_lines_split_into_source_and_phrases():
    assert split_line("a big dog\tBIG\tRED HOUSE") == ("a big dog", ["BIG", "RED HOUSE"])
    assert split_line("no phrases here") == ("no phrases here", [])
    assert split_line("trailing tab\t") == ("trailing tab", [""])


def test_phrases_are_tokenized_and_bped_like_the_target_side(terminology):
    encoder = terminology.encoder
    pieces = encoder.pieces("RED HOUSE!")
    assert pieces == terminology.encoder.pipeline.encode("RED HOUSE!").split()
    assert len(pieces) > 3 and any(p.endswith("@@") for p in pieces)  # several subwords, Moses split the "!"
    assert encoder.encode("RED HOUSE!", "line 1").tolist() == ids(terminology, " ".join(pieces))
    assert encoder.encode("  CAT  ", "line 1").tolist() == ids(terminology, "CAT")


@pytest.mark.parametrize("phrase", ["", "   "])
def test_an_empty_phrase_is_one_line_naming_the_sentence(terminology, phrase):
    with pytest.raises(UsageError) as e:
        terminology.encoder.encode(phrase, "stdin: line 3")
    assert str(e.value).startswith("stdin: line 3: an empty constraint;")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("phrase, pieces", [("ZEBRA", "'Z@@', 'E@@', 'B@@', 'R@@'"), ("CAT <unk>", "'<', 'n@@', '>'")])
def test_a_piece_outside_the_dictionary_is_refused_not_forced_as_unk(terminology, phrase, pieces):
    with pytest.raises(UsageError) as e:
        terminology.encoder.encode(phrase, "stdin: line 2")
    message = str(e.value)
    assert message.startswith(f"stdin: line 2: constraint {phrase!r}: its piece(s) {pieces} are not in the target "
                              f"dictionary ({terminology.data.path / 'dict.de.txt'}), so the model could only write "
                              "them as <unk>")


def test_a_phrase_given_twice_is_forced_once_and_none_is_no_terms(terminology):
    cat = terminology.encoder.encode("CAT", "x")
    terms = make_terms([("CAT", cat), ("DOG", terminology.encoder.encode("DOG", "x")), (" CAT", cat)], ordered=True)
    assert terms is not None and terms.texts == ("CAT", "DOG") and terms.constraints.ordered
    assert make_terms([], ordered=False) is None


def test_phrases_longer_than_the_output_may_be_are_refused(terminology):
    gen = GenerationConfig(max_len_a=0.0, max_len_b=3)
    limit = output_limit(gen, 1024, 5)
    assert limit == int(length_limits(gen, 1024, torch.tensor([5]))[0]) == 3
    fits = terminology.terms([], ["BIG CAT"], "w")
    assert fits is not None
    check_fits(fits, limit, "w")
    too_long = terminology.terms([], ["BIG CAT", "HOUSE"], "stdin: line 4")
    assert too_long is not None
    with pytest.raises(UsageError) as e:
        check_fits(too_long, limit, "stdin: line 4")
    need = sum(len(p) for p in too_long.constraints.phrases)
    assert str(e.value).startswith(f"stdin: line 4: the constraints need {need} target tokens, more than the 3 ")
    assert "--max-len-b" in str(e.value)


def test_beam_search_becomes_the_constrained_one_and_other_searches_are_refused():
    gen = GenerationConfig()
    assert with_constrained_search(gen).search == {"name": "constrained"}
    constrained = GenerationConfig(search={"name": "constrained"})
    assert with_constrained_search(constrained) is constrained
    assert with_constrained_search(constrained, "--search constrained") is constrained
    with pytest.raises(UsageError, match=r"^--search beam: cannot force terms"):
        with_constrained_search(gen, "--search beam")
    with pytest.raises(UsageError, match=r"^--search sampling: cannot force terms"):
        with_constrained_search(GenerationConfig(search={"name": "sampling"}))


def test_unmet_phrases_are_those_the_output_lacks(terminology):
    enc = terminology.encoder

    def out(text: str) -> torch.Tensor:
        return torch.cat([enc.encode(text, "x"), torch.tensor([terminology.data.tgt_dict.eos()])])

    unordered = terminology.terms([], ["RED HOUSE", "CAT"], "x")
    assert unmet_phrases(unordered, out("THE CAT SAT ON THE RED HOUSE")) == []
    assert unmet_phrases(unordered, out("THE CAT SAT ON THE RED MAT")) == ["RED HOUSE"]
    ordered = terminology.terms([], ["RED HOUSE", "CAT"], "x", ordered=True)
    assert unmet_phrases(ordered, out("THE RED HOUSE CAT")) == []
    assert unmet_phrases(ordered, out("THE CAT SAT ON THE RED HOUSE")) == ["CAT"]  # not after RED HOUSE
    assert unmet_phrases(None, out("CAT")) == []


def test_the_pieces_that_continue_a_word_are_those_of_subword_nmt_ending_with_the_separator(terminology):
    """mid_word: per target id, whether a word goes on after it (subword-nmt's "@@" pieces); built once per model
    and shared by every sentence's constraints, glossary terms included."""
    from nmt.data.text_pipeline import BPE
    from nmt.plugins.bpe.none import NoBPE
    from nmt.registry import NoOptions

    symbols = terminology.data.tgt_dict.symbols
    mid_word = terminology.encoder.mid_word
    assert mid_word is not None and mid_word.tolist() == [s.endswith("@@") for s in symbols]
    assert 0 < int(mid_word.sum()) < len(symbols) and terminology.encoder.mid_word is mid_word
    terms = terminology.terms([], ["RED HOUSE", "CAT"], "x")
    assert terms is not None and terms.constraints.mid_word is mid_word
    bpe = terminology.encoder.pipeline.bpe
    assert bpe.continues_word("HO@@") and not bpe.continues_word("HOUSE") and not bpe.continues_word("@@X")
    # no subwords, or pieces that mark a word's start ("▁Haus"): a phrase starts a word wherever it goes
    assert not NoBPE(NoOptions(), None).continues_word("HO@@")
    assert not BPE.continues_word(bpe, "\u2581HO")
