"""--skip-invalid-size-inputs-valid-test in nmt-generate and nmt-validate, as fairseq has it: their
errors about a too-long sentence suggest the flag, and the flag skips such sentences (longer than
the model's positions or bigger than --max-tokens) with a warning counting them. Through the real
commands, in this process."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from nmt.cli.generate import main as generate_main
from nmt.cli.validate import main as validate_main
from test_generate_setup import call_cli, make_checkpoint, make_data_bin, one_error_line

torch.set_num_threads(1)
FLAG = "--skip-invalid-size-inputs-valid-test"
N_TEST = 8


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from nmt.data.language_pair_dataset import load_language_pair

    folder = tmp_path_factory.mktemp("skip_invalid")
    data_bin = make_data_bin(folder, n_test=N_TEST)
    test = load_language_pair(data_bin, "test", "en", "de")
    src, both = test.src_sizes, np.maximum(test.src_sizes, test.tgt_sizes)
    limit = int(np.median(both))  # some sentences fit, some do not
    too_long = {"source": set(np.flatnonzero(src > limit).tolist()), "both": set(np.flatnonzero(both > limit).tolist())}
    assert 0 < len(too_long["source"]) < N_TEST and 0 < len(too_long["both"]) < N_TEST
    short = make_checkpoint(data_bin, folder / "short.pt", max_source_positions=limit, max_target_positions=limit)
    return data_bin, make_checkpoint(data_bin, folder / "a.pt"), short, limit, too_long


def run(capsys, main, *argv) -> tuple[int, str, str]:
    code = call_cli(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def translated(out: str) -> set[int]:
    return {int(i) for i in re.findall(r"^H-(\d+)\t", out, re.M)}


@pytest.mark.parametrize("limit_by", ["positions", "max-tokens"])
def test_generate_refuses_a_too_long_sentence_naming_the_flag(setup, capsys, limit_by):
    data_bin, ckpt, short, limit, _ = setup
    flags = ["--path", short] if limit_by == "positions" else ["--path", ckpt, "--max-tokens", limit]
    code, out, err = run(capsys, generate_main, data_bin, *flags)
    one_error_line(err, "nmt-generate", "sentence", FLAG)
    assert code == 1 and "H-" not in out


@pytest.mark.parametrize("limit_by", ["positions", "max-tokens"])
def test_generate_skips_and_counts_too_long_sentences(setup, capsys, limit_by):
    data_bin, ckpt, short, limit, too_long = setup
    flags = ["--path", short] if limit_by == "positions" else ["--path", ckpt, "--max-tokens", limit]
    code, out, err = run(capsys, generate_main, data_bin, *flags, "--max-len-b", "4", FLAG)
    assert code == 0, err
    skipped = too_long["source"]  # nmt-generate reads only the source side
    assert translated(out) == set(range(N_TEST)) - skipped
    assert f"skipped {len(skipped)} of {N_TEST} sentences of split test" in out
    assert "Generate test with beam=5: BLEU" in out


@pytest.mark.parametrize("limit_by", ["positions", "max-tokens"])
def test_validate_refuses_a_too_long_sentence_naming_the_flag(setup, capsys, limit_by):
    data_bin, ckpt, short, limit, _ = setup
    flags = ["--path", short] if limit_by == "positions" else ["--path", ckpt, "--max-tokens", limit]
    code, out, err = run(capsys, validate_main, data_bin, "--valid-subset", "test", *flags)
    one_error_line(err, "nmt-validate", "test: sentence", FLAG)
    assert code == 1 and out == ""


@pytest.mark.parametrize("limit_by", ["positions", "max-tokens"])
def test_validate_skips_and_counts_too_long_sentences(setup, capsys, limit_by):
    data_bin, ckpt, short, limit, too_long = setup
    flags = ["--path", short] if limit_by == "positions" else ["--path", ckpt, "--max-tokens", limit]
    code, out, err = run(capsys, validate_main, data_bin, "--valid-subset", "test", *flags, FLAG)
    assert code == 0, err
    assert re.match(r"valid on 'test' subset \| loss \d+\.\d+ ", out)
    skipped = len(too_long["both"])  # the target side counts too
    assert f"skipped {skipped} of {N_TEST} sentences of split test" in err
    if limit_by == "positions":  # one batch (--max-tokens 4096) of the sentences that fit
        assert f"| bsz {N_TEST - skipped} |" in out
