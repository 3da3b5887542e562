"""nmt-generate --workers N: the split is dealt out to N spawned processes, whose hypotheses equal one
process's; a worker's failure ends the command with its one-line reason and leaves no process behind."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

from nmt.generation.worker_processes import deal
from test_generate_cli import generate, lines_of
from test_generate_setup import make_checkpoint, make_data_bin

N_TEST = 9


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gen_workers")
    data_bin = make_data_bin(folder, n_test=N_TEST)
    return folder, data_bin, make_checkpoint(data_bin, folder / "a.pt", seed=0)


def test_deal_gives_every_worker_every_length():
    ordered = np.arange(10, dtype=np.int64) * 7  # dataset indices in length order
    shares = deal(ordered, 3)
    assert [s.tolist() for s in shares] == [[0, 35, 42], [7, 28, 49], [14, 21, 56, 63]]
    assert sorted(np.concatenate(shares).tolist()) == ordered.tolist()
    assert [len(s) for s in deal(ordered[:1], 2)] == [1, 0]  # more workers than sentences: one has none


@pytest.mark.parametrize("beam", ["1", "3"])
def test_workers_give_one_process_hypotheses_and_alignments(setup, capsys, beam):
    _, data_bin, a = setup
    outs = []
    for workers in ("1", "2"):
        code, out, err = generate(capsys, data_bin, "--path", a, "--beam", beam, "--nbest", beam, "--max-len-b", "6",
                                  "--batch-size", "4", "--print-alignment", "--workers", workers)
        assert code == 0, err
        assert f"translated {N_TEST} sentences" in out
        outs.append({kind: lines_of(out, kind) for kind in "SHPA"})
    assert outs[0] == outs[1]
    assert sorted(outs[1]["H"]) == list(range(N_TEST))
    assert not multiprocessing.active_children()


@pytest.mark.slow  # ten worker processes, each loading torch and the model
def test_more_workers_than_sentences(setup, capsys):
    _, data_bin, a = setup
    code, out, err = generate(capsys, data_bin, "--path", a, "--beam", "2", "--max-len-b", "4", "--quiet",
                              "--workers", str(N_TEST + 1), "--threads", "1")
    assert code == 0, err
    assert f"translated {N_TEST} sentences" in out


def test_a_failing_worker_ends_the_command_in_one_line(setup, capsys, tmp_path):
    """A plugin that fails only inside a worker process: the parent reports the worker's reason."""
    _, data_bin, a = setup
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "fails_in_workers.py").write_text(
        "import multiprocessing\n"
        "if multiprocessing.current_process().name == 'nmt-generate-worker':\n"
        "    raise RuntimeError('this plugin refuses to load in a worker')\n")
    code, out, err = generate(capsys, data_bin, "--path", a, "--beam", "2", "--quiet", "--workers", "2",
                              "--user-dir", plugins)
    assert code != 0
    assert "refuses to load in a worker" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert "translated" not in out
    assert not multiprocessing.active_children()


@pytest.mark.slow  # a worker process and a plot: several seconds
def test_attention_plot_with_workers_loads_the_model_here(setup, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    _, data_bin, a = setup
    code, _, err = generate(capsys, data_bin, "--path", a, "--beam", "2", "--max-len-b", "4", "--workers", "2",
                            "--attention-plot", tmp_path / "plots", "--attention-plot-sentences", "2", "--quiet")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        f"sent{s}_layer1_head{h}.png" for s in range(2) for h in range(2)]
