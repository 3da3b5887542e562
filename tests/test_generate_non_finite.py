"""A checkpoint with NaN weights once made nmt-generate exit 0 with no hypotheses and no BLEU line,
and nmt-interactive print empty lines. Now it is refused when loaded, naming the checkpoint and the
parameter; and a search that still ends with non-finite scores (finite weights whose activations
overflow) stops naming the sentence instead of printing nothing. Through the real commands."""

from __future__ import annotations

import pytest
import torch

from nmt.cli.generate import main as generate_main
from nmt.cli.interactive import main as interactive_main
from nmt.cli.validate import main as validate_main
from test_generate_setup import call_cli, edited_checkpoint, make_checkpoint, make_data_bin, one_error_line

torch.set_num_threads(1)
NAN_PARAM = "decoder.layers.1.ffn.fc1.weight"
MAINS = {"nmt-generate": generate_main, "nmt-interactive": interactive_main, "nmt-validate": validate_main}


def set_nan(weights: dict) -> None:
    weights[NAN_PARAM][0, 0] = float("nan")


def overflow(weights: dict) -> None:
    """Finite weights (1e37) whose products overflow float32: the log-probabilities become NaN."""
    weights["encoder.layers.0.ffn.fc1.weight"].mul_(1e37)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("non_finite")
    data_bin = make_data_bin(folder, n_test=4)
    good = make_checkpoint(data_bin, folder / "good.pt")
    (folder / "in.txt").write_text("the cat sat on the mat.\na dog!\n", encoding="utf-8")
    return (folder, data_bin, edited_checkpoint(good, folder / "nan.pt", set_nan),
            edited_checkpoint(good, folder / "overflow.pt", overflow))


def argv(prog: str, folder, data_bin, ckpt) -> list:
    extra = {"nmt-generate": [], "nmt-interactive": ["--input", folder / "in.txt"],
             "nmt-validate": ["--valid-subset", "test"]}[prog]
    return [data_bin, "--path", ckpt, *extra]


@pytest.mark.parametrize("prog", list(MAINS))
def test_nan_weights_are_refused_naming_the_checkpoint_and_parameter(setup, capsys, prog):
    folder, data_bin, nan, _ = setup
    code = call_cli(MAINS[prog], argv(prog, folder, data_bin, nan))
    out, err = capsys.readouterr()
    one_error_line(err, prog, "nan.pt", NAN_PARAM, "NaN or inf", "earlier checkpoint")
    assert code == 1 and out == ""


@pytest.mark.parametrize("prog", ["nmt-generate", "nmt-interactive"])
@pytest.mark.parametrize("search", [["--beam", "3"], ["--beam", "1"]], ids=["beam", "greedy"])
def test_non_finite_scores_stop_naming_the_sentence(setup, capsys, prog, search):
    folder, data_bin, _, over = setup
    code = call_cli(MAINS[prog], [*argv(prog, folder, data_bin, over), *search])
    out, err = capsys.readouterr()
    where = "split test, sentence " if prog == "nmt-generate" else "in.txt: line 1:"
    one_error_line(err, prog, where, "the search", "not finite")
    assert code == 1
    assert "BLEU" not in out and "H-" not in out and out.strip() == ""


def test_finite_weights_still_translate(setup, capsys):
    folder, data_bin, _, _ = setup
    code = call_cli(generate_main, [data_bin, "--path", folder / "good.pt", "--max-len-b", "4"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "BLEU" in out and out.count("\nH-") + out.startswith("H-") == 4
