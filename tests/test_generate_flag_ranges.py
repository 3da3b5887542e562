"""nmt-generate refuses a generation flag outside its declared range before any work, with a real
data-bin and checkpoint at hand: exit 2, one ``nmt-generate: error:`` line naming the flag, no
output (tests/test_config_contract.py walks every declared range of every command)."""

from __future__ import annotations

import pytest
import torch

from nmt.cli.generate import main as generate_main
from test_generate_setup import call_cli, make_checkpoint, make_data_bin, one_error_line

torch.set_num_threads(1)

OUT_OF_RANGE = [
    ("--lenpen", "nan"),
    ("--unkpen", "nan"),
    ("--batch-size", "0"),  # nmt-train refuses it; nmt-generate took 0 for "unset"
    ("--threads", "-3"),
    ("--beam", "0"),
    ("--nbest", "0"),
    ("--max-tokens", "0"),
    ("--max-len-b", "-1"),
    ("--min-len", "-1"),
    ("--no-repeat-ngram-size", "-1"),
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("flag_ranges")
    data_bin = make_data_bin(folder, n_train=30, n_test=2)
    return data_bin, make_checkpoint(data_bin, folder / "a.pt")


@pytest.mark.parametrize("flag,value", OUT_OF_RANGE, ids=[f"{f}={v}" for f, v in OUT_OF_RANGE])
def test_out_of_range_flag_is_a_usage_error(setup, capsys, flag, value):
    data_bin, ckpt = setup
    code = call_cli(generate_main, [data_bin, "--path", ckpt, "--max-len-b", "3", flag, value])
    out, err = capsys.readouterr()
    one_error_line(err, "nmt-generate", flag)
    assert code == 2, err
    assert "H-" not in out
