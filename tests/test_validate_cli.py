"""nmt-validate scores a checkpoint exactly as nmt-train's own validation did, and tells two
checkpoints of one run apart (what the quickstart's keep-the-average-or-not choice relies on)."""

from __future__ import annotations

import re

import pytest
import torch

from tests.train_toy_data import TINY_MODEL, make_toy_task, read_log, run_train


def validate(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from nmt.cli.validate import main

    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def loss_of(line: str) -> float:
    return float(re.search(r"\| loss ([0-9.]+) ", line).group(1))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("validate")
    data = make_toy_task(folder / "toy", n_train=200, n_valid=32)
    save = folder / "ckpt"
    run_train([data, *TINY_MODEL, "--max-tokens", "256", "--max-update", "12", "--save-interval-updates", "6",
               "--lr", "1e-3", "--warmup-updates", "4", "--label-smoothing", "0.1", "--num-threads", "1",
               "--save-dir", save, "--log-format", "none"])
    return data, save


def test_loss_matches_training_validation(trained, capsys):
    data, save = trained
    code, out, _ = validate([data, "--path", save / "checkpoint_last.pt", "--threads", "1"], capsys)
    assert code == 0
    logged = read_log(save, "valid")[-1]
    assert logged["num_updates"] == 12
    assert loss_of(out) == pytest.approx(logged["loss"], abs=2e-3)
    assert "nll_loss" in out and "checkpoint_last.pt" in out


def test_several_checkpoints_each_get_a_line(trained, capsys):
    data, save = trained
    early = next(save.glob("checkpoint_*_6.pt"))
    code, out, _ = validate([data, "--path", f"{early}:{save / 'checkpoint_last.pt'}", "--threads", "1"], capsys)
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == 2 and early.name in lines[0]
    assert loss_of(lines[0]) != loss_of(lines[1])  # six more updates changed the model


def test_missing_path_is_a_usage_error(trained, capsys):
    data, _ = trained
    code, _, err = validate([data], capsys)
    assert code == 2 and "--path is required" in err


def test_missing_checkpoint_names_the_file(trained, capsys):
    data, save = trained
    code, _, err = validate([data, "--path", save / "nope.pt"], capsys)
    assert code == 1 and "nope.pt" in err


def test_each_checkpoint_is_read_once(trained, capsys, monkeypatch):
    import nmt.checkpoint.format as checkpoint_format

    data, save = trained
    reads: list[str] = []
    read_file = checkpoint_format.read_file

    def counting(path, *args, **kwargs):
        reads.append(str(path))
        return read_file(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint_format, "read_file", counting)
    code, out, _ = validate([data, "--path", save / "checkpoint_last.pt", "--threads", "1"], capsys)
    assert code == 0 and "loss" in out
    assert reads == [str(save / "checkpoint_last.pt")]  # the weights and the criterion come from one read
