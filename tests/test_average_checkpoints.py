"""nmt-average-checkpoints: the element-wise mean, refusal of mismatched checkpoints, and an
output that nmt-generate loads."""

from __future__ import annotations

import pytest
import torch

from nmt.checkpoint.format import load_checkpoint
from nmt.cli.average_checkpoints import main as average_main
from nmt.cli.generate import main as generate_main
from test_generate_setup import call_cli, make_checkpoint, make_data_bin


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("avg")
    data_bin = make_data_bin(folder, n_test=3)
    runs = folder / "run"
    runs.mkdir()
    for epoch in (1, 2, 3):
        make_checkpoint(data_bin, runs / f"checkpoint{epoch}.pt", seed=epoch, epoch=epoch, num_updates=10 * epoch)
    return folder, data_bin, runs


def run_cli(main, capsys, *argv) -> tuple[int, str, str]:
    code = call_cli(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_average_of_two_is_the_elementwise_mean(setup, capsys, tmp_path):
    folder, data_bin, runs = setup
    a, b = runs / "checkpoint1.pt", runs / "checkpoint2.pt"
    code, out, err = run_cli(average_main, capsys, "--inputs", f"{a}:{b}", "--output", tmp_path / "avg.pt")
    assert code == 0, err
    sa, sb, avg = (load_checkpoint(p)["model"] for p in (a, b, tmp_path / "avg.pt"))
    assert set(avg) == set(sa)
    for name in sa:
        assert torch.allclose(avg[name], (sa[name] + sb[name]) / 2, atol=1e-6), name
    tied = [n for n in avg if avg[n].data_ptr() == avg["encoder.embedder.embed_tokens.weight"].data_ptr()]
    assert len(tied) > 1  # shared embeddings stay one tensor


def test_last_epoch_checkpoints_of_a_folder_and_generate_loads_the_result(setup, capsys, tmp_path):
    folder, data_bin, runs = setup
    out_path = tmp_path / "avg_last2.pt"
    code, out, err = run_cli(average_main, capsys, "--inputs", runs, "--num-epoch-checkpoints", "2",
                             "--output", out_path)
    assert code == 0, err
    assert "checkpoint2.pt" in out and "checkpoint3.pt" in out and "checkpoint1.pt" not in out
    state = load_checkpoint(out_path)
    s2, s3 = (load_checkpoint(runs / f"checkpoint{e}.pt")["model"] for e in (2, 3))
    name = next(n for n in s2 if s2[n].is_floating_point())
    assert torch.allclose(state["model"][name], (s2[name] + s3[name]) / 2, atol=1e-6)
    assert state["training"]["optimizer"] is None
    code, out, err = run_cli(generate_main, capsys, data_bin, "--path", out_path, "--beam", "2", "--max-len-b", "4")
    assert code == 0, err
    assert "BLEU" in out


def test_mismatched_checkpoints_are_refused(setup, capsys, tmp_path):
    folder, data_bin, runs = setup
    other = make_checkpoint(data_bin, tmp_path / "deeper.pt", decoder_layers=3)
    code, _, err = run_cli(average_main, capsys, "--inputs", f"{runs / 'checkpoint1.pt'}:{other}",
                           "--output", tmp_path / "x.pt")
    assert code == 1 and "different architectures" in err and "decoder_layers" in err
    assert not (tmp_path / "x.pt").exists()

    state = load_checkpoint(runs / "checkpoint1.pt")
    state["dictionaries"] = {**state["dictionaries"], "target": "0" * 64}
    torch.save(state, tmp_path / "otherdict.pt")
    code, _, err = run_cli(average_main, capsys, "--inputs", f"{runs / 'checkpoint1.pt'}:{tmp_path / 'otherdict.pt'}",
                           "--output", tmp_path / "x.pt")
    assert code == 1 and "target dictionaries differ" in err


def test_usage_errors(setup, capsys, tmp_path):
    folder, data_bin, runs = setup
    code, _, err = run_cli(average_main, capsys, "--inputs", runs, "--num-epoch-checkpoints", "5",
                           "--output", tmp_path / "x.pt")
    assert code == 2 and "holds only 3" in err
    code, _, err = run_cli(average_main, capsys, "--inputs", runs, "--output", tmp_path / "x.pt")
    assert code == 2 and "is a folder" in err
    code, _, err = run_cli(average_main, capsys, "--inputs", runs / "checkpoint1.pt")
    assert code == 2 and "--output" in err
