"""Flags whose size would make nmt-generate / nmt-interactive allocate without bound: --beam is
refused above the target vocabulary, output lengths are capped by the model's positions, and
absurd --batch-size / --max-tokens / --buffer-size values change nothing (only real sentences
are ever allocated). Through the real commands, in this process."""

from __future__ import annotations

import re

import pytest
import torch

from nmt.cli.generate import main as generate_main
from nmt.cli.interactive import main as interactive_main
from test_generate_setup import call_cli, make_checkpoint, make_data_bin, one_error_line

torch.set_num_threads(1)
HUGE = str(10**20)  # beyond int64: once crashed the length limit with an OverflowError
POSITIONS = 12


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from nmt.data.dictionary import Dictionary
    from nmt.generation.guards import real_symbols

    folder = tmp_path_factory.mktemp("bounds")
    data_bin = make_data_bin(folder, n_test=4)
    ckpt = make_checkpoint(data_bin, folder / "a.pt")
    short = make_checkpoint(data_bin, folder / "short.pt", max_source_positions=64,
                            max_target_positions=POSITIONS)
    (folder / "in.txt").write_text("the cat sat on the mat.\na dog!\n", encoding="utf-8")
    tgt_dict = Dictionary.load(data_bin / "dict.de.txt")
    assert len(tgt_dict) > real_symbols(tgt_dict)  # the dictionary has madeupword fillers, not counted
    return folder, data_bin, ckpt, short, real_symbols(tgt_dict) - 1


def run(capsys, main, *argv) -> tuple[int, str, str]:
    code = call_cli(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def hypotheses(out: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^H-(\d+)\t[^\t]*\t(.*)$", out, re.M)}


@pytest.mark.parametrize("search", ["beam", "sampling"])
def test_beam_above_the_vocabulary_is_refused_by_generate(setup, capsys, search):
    folder, data_bin, ckpt, _, limit = setup
    code, out, err = run(capsys, generate_main, data_bin, "--path", ckpt, "--search", search, "--beam", "100000")
    one_error_line(err, "nmt-generate", "--beam 100000", f"at most {limit}", "dict.de.txt")
    assert code == 2 and "H-" not in out


@pytest.mark.parametrize("search", ["beam", "sampling"])
def test_beam_above_the_vocabulary_is_refused_by_interactive(setup, capsys, search):
    folder, data_bin, ckpt, _, limit = setup
    code, out, err = run(capsys, interactive_main, data_bin, "--path", ckpt, "--input", folder / "in.txt",
                         "--search", search, "--beam", limit + 1)
    one_error_line(err, "nmt-interactive", f"--beam {limit + 1}", f"at most {limit}")
    assert code == 2 and out == ""


@pytest.mark.parametrize("search", ["beam", "sampling"])
def test_beam_at_the_limit_runs(setup, capsys, search):
    folder, data_bin, ckpt, _, limit = setup
    code, out, err = run(capsys, generate_main, data_bin, "--path", ckpt, "--search", search, "--beam", limit,
                         "--max-len-b", "3", "--batch-size", "2")
    assert code == 0, err
    assert sorted(hypotheses(out)) == [0, 1, 2, 3]


def test_huge_length_limits_are_capped_by_the_model_positions(setup, capsys):
    """--max-len-a/-b beyond any position (even beyond int64) give the outputs of the largest limit
    the model can position-encode; with --min-len at that limit every output is exactly that long, and a
    --min-len above it is refused (it would lengthen outputs past the limit)."""
    folder, data_bin, _, short, _ = setup
    cap = POSITIONS - 1  # generated tokens; the eos takes the last position
    _, capped, _ = run(capsys, generate_main, data_bin, "--path", short, "--max-len-b", cap)
    for flags in (["--max-len-b", HUGE], ["--max-len-a", "1e30"], ["--max-len-b", str(2**63 - 1)]):
        code, out, err = run(capsys, generate_main, data_bin, "--path", short, *flags)
        assert code == 0, err
        assert hypotheses(out) == hypotheses(capped), flags
    code, out, err = run(capsys, generate_main, data_bin, "--path", short, "--max-len-b", HUGE,
                         "--no-repeat-ngram-size", HUGE)  # an n-gram longer than any output never repeats
    assert code == 0, err
    assert hypotheses(out) == hypotheses(capped)
    for beam in ("1", "3"):  # beam search compares --min-len with a tensor of steps (one per row)
        code, out, err = run(capsys, generate_main, data_bin, "--path", short, "--max-len-b", HUGE, "--min-len", cap,
                             "--beam", beam, "--batch-size", "2")
        assert code == 0, err
        assert [len(h.split()) for h in hypotheses(out).values()] == [cap] * 4
    code, out, err = run(capsys, generate_main, data_bin, "--path", short, "--max-len-b", HUGE, "--min-len", HUGE)
    one_error_line(err, "nmt-generate", f"--min-len {HUGE}", f"at most {cap}")
    assert code == 2 and "H-" not in out


def test_huge_length_limit_in_interactive(setup, capsys):
    folder, data_bin, _, short, _ = setup
    code, out, err = run(capsys, interactive_main, data_bin, "--path", short, "--input", folder / "in.txt",
                         "--max-len-b", HUGE, "--min-len", POSITIONS - 1, "--verbose")
    assert code == 0, err
    assert [len(h.split()) for h in hypotheses(out).values()] == [POSITIONS - 1] * 2


def test_absurd_batch_sizes_change_nothing(setup, capsys):
    """Batches are cut from the split's real sentences: no allocation follows the flag's value."""
    folder, data_bin, ckpt, _, _ = setup
    _, default, _ = run(capsys, generate_main, data_bin, "--path", ckpt, "--max-len-b", "5")
    for flags in (["--batch-size", HUGE], ["--max-tokens", HUGE], ["--max-tokens", HUGE, "--batch-size", HUGE]):
        code, out, err = run(capsys, generate_main, data_bin, "--path", ckpt, "--max-len-b", "5", *flags)
        assert code == 0, err
        assert hypotheses(out) == hypotheses(default), flags
    code, out, err = run(capsys, interactive_main, data_bin, "--path", ckpt, "--input", folder / "in.txt",
                         "--buffer-size", HUGE, "--batch-size", HUGE, "--max-tokens", HUGE)
    assert code == 0, err
    assert len(out.splitlines()) == 2
