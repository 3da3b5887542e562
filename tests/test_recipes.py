"""studies/recipes (python -m studies.recipes) on a toy task: candidates trained for a time budget, scored on
valid (best checkpoint and the average of the last ones, per length penalty), ensembles of two models (half the time
each, or side by side on half the cores), the best setting on valid translated on the test split once (and a later
best's too, the earlier kept), a rerun that trains nothing, and one with another length penalty that only scores the
kept checkpoints."""

from __future__ import annotations

import json
import shutil
import threading

import pytest

from studies.recipes import run as search, scoring
from studies.recipes.job import RecipeJob
from studies.recipes.table import markdown
from studies.record import Table
from tests.example_scripts import call
from tests.repo_scripts import ROOT
from tests.train_toy_data import make_toy_task

TINY = ("--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32 --decoder-embed-dim 32 "
        "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --num-threads 1 --log-format none "
        "--max-tokens 256 --max-update 12 --save-interval-updates 1")
RECORDS = ROOT / "studies" / "recipes" / "record"


class _Stop(Exception):
    pass


@pytest.mark.parametrize("name, hours, threads", [("ensemble", "0.0416667", False),
                                                  ("ensemble_side_by_side", "0.0833333", True),
                                                  ("quickstart", "0.0833333", False)])
def test_an_ensembles_two_models_share_the_time_or_the_cores(tmp_path, monkeypatch, name, hours, threads):
    """5 minutes: an ensemble trains two models (seeds 1 and 2) for half of it each, one after the other on every
    core, or side by side for all of it on half the cores each; another candidate one model for all of it."""
    commands: list[str] = []
    models = 1 if name == "quickstart" else 2
    lock = threading.Lock()

    def trained(argv, prefix):
        with lock:
            commands.append(" ".join(str(a) for a in argv))
            if len(commands) == models:
                raise _Stop  # nothing is trained: the commands are what this checks

    monkeypatch.setattr(search, "train_to_end", trained)
    job = RecipeJob(data=str(tmp_path), minutes=5.0, precision="fp32", out_dir=str(tmp_path / "runs"))
    with pytest.raises(_Stop):
        search.run_candidate(job, name, ["1.0"])
    commands.sort(key=lambda c: "--seed 2" in c)
    assert all(f"--stop-time-hours {hours}" in c for c in commands) and "--seed 1" in commands[0]
    assert len(commands) == models and all("--seed 2" in c for c in commands[1:])
    assert all(("--num-threads" in c) == threads for c in commands)


@pytest.mark.slow
def test_candidates_ensemble_test_once_and_rerun(tmp_path, capsys):
    data = make_toy_task(tmp_path / "toy", n_train=120, n_valid=16)
    out = tmp_path / "runs"
    argv = [data, "--candidates", "ensemble_side_by_side,quickstart", "--minutes", "5", "--lenpens", "1.0", "--test",
            "--test-subset", "valid", "--precision", "fp32", "--out-dir", out, f"--train-args={TINY}"]
    assert call(search, argv) == 0
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert set(runs) == {"ensemble_side_by_side", "quickstart", "test"}
    assert runs["ensemble_side_by_side"]["updates"] == [12, 12] and runs["quickstart"]["updates"] == [12]
    assert "[seed2] $ " in capsys.readouterr().out  # side by side: each model's lines say whose they are
    # 12 updates, a checkpoint every update but at the 3 epoch ends: the best checkpoints, the averages of the
    # last 5 and of all 9 (the wide average, capped at what exists), each with the length penalty given
    scores = {name: runs[name]["valid_bleu"] for name in ("ensemble_side_by_side", "quickstart")}
    assert set(scores["quickstart"]) == {f"{kind}/lenpen {p}" for kind in ("best", "average", "wide_average")
                                         for p in ("1.0",)}
    kept = runs["ensemble_side_by_side"]["checkpoints"]
    assert [p.rsplit("/", 1)[-1] for p in kept["wide_average"]] == ["checkpoint_wide_average.pt"] * 2
    winner = max(scores, key=lambda name: max(scores[name].values()))
    assert runs["test"]["valid_bleu"] == max(scores[winner].values()) and runs["test"]["candidate"] == winner
    assert runs["test"]["setting"] == max(scores[winner], key=scores[winner].get)
    kind, lenpen = runs["test"]["setting"].split("/lenpen ")
    assert (out / winner / f"test-{kind}-{lenpen}" / "generate-valid.txt").is_file()
    table = (out / "table.md").read_text()
    assert "| ensemble_side_by_side | (quickstart) | 12 + 12 |" in table and f"Chosen on valid: {winner} (" in table

    capsys.readouterr()
    assert call(search, argv) == 0  # the rerun trains and translates nothing
    assert capsys.readouterr().out.count("skipped") == 2
    assert json.loads((out / "results.json").read_text())["runs"] == runs

    more = [str(a) for a in argv]
    more[more.index("1.0")] = "1.0,1.4"
    more[more.index("ensemble_side_by_side,quickstart")] = "quickstart"
    more.remove("--test")
    assert call(search, more) == 0  # another length penalty: scored on the kept checkpoints, nothing trained
    commands = [line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("$ ")]
    assert [c.rsplit("/", 1)[-1] for c in commands] == ["nmt-generate"] * 3  # the best and the averages, at 1.4
    rescored = json.loads((out / "results.json").read_text())["runs"]
    assert set(rescored["quickstart"]["valid_bleu"]) == set(runs["quickstart"]["valid_bleu"]) | {
        "best/lenpen 1.4", "average/lenpen 1.4", "wide_average/lenpen 1.4"}
    before, now = runs["quickstart"]["valid_bleu"], rescored["quickstart"]["valid_bleu"]
    assert now["best/lenpen 1.0"] == before["best/lenpen 1.0"]
    assert rescored["ensemble_side_by_side"] == runs["ensemble_side_by_side"]

    # a later best on valid (the other candidate's, made so by hand): --test translates it, the earlier test stays
    loser = ({"ensemble_side_by_side", "quickstart"} - {winner}).pop()
    rescored[loser]["valid_bleu"]["best/lenpen 1.0"] = 99.0
    results = json.loads((out / "results.json").read_text())
    (out / "results.json").write_text(json.dumps({**results, "runs": rescored}))
    capsys.readouterr()
    assert call(search, argv) == 0
    commands = [line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("$ ")]
    assert [c.rsplit("/", 1)[-1] for c in commands] == ["nmt-generate"]  # the new best only
    after = json.loads((out / "results.json").read_text())["runs"]
    assert (after["test"]["candidate"], after["test"]["setting"], after["test"]["valid_bleu"]) == (
        loser, "best/lenpen 1.0", 99.0)
    assert after["test_earlier"] == {**runs["test"], "variant": "test_earlier"}
    assert (out / loser / "test-best-1.0" / "generate-valid.txt").is_file()
    assert f"Chosen before it: {winner} ({runs['test']['setting']}," in (out / "table.md").read_text()

    earlier_only = [str(a) for a in argv]
    earlier_only[earlier_only.index("ensemble_side_by_side,quickstart")] = winner
    table = (out / "table.md").read_text()
    capsys.readouterr()
    assert call(search, earlier_only) == 0  # the best of the whole record is tested already, not the best of these
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("$ ")]
    assert json.loads((out / "results.json").read_text())["runs"] == after
    # table.md is the record's: every candidate and length penalty in it, whatever this rerun named
    assert (out / "table.md").read_text() == table and f"| {loser} |" in table and "wide_average/lenpen 1.4" in table


@pytest.mark.parametrize("found, spans", [(1, {}), (3, {"average": 3}), (5, {"average": 5}),
                                          (6, {"average": 5, "wide_average": 6}),
                                          (25, {"average": 5, "wide_average": 20})])
def test_averages_span_what_exists_and_skip_repeats(tmp_path, monkeypatch, found, spans):
    for update in range(found):
        (tmp_path / f"checkpoint_1_{update}.pt").touch()
    commands: list[list[str]] = []
    monkeypatch.setattr(scoring, "call", lambda argv, *rest: commands.append([str(a) for a in argv]))
    made = scoring.averages(tmp_path)
    assert {kind: path.name for kind, path in made.items()} == {kind: f"checkpoint_{kind}.pt" for kind in spans}
    assert [int(c[c.index("--num-update-checkpoints") + 1]) for c in commands] == list(spans.values())


@pytest.mark.slow
def test_record_dir_outlives_the_checkpoints(tmp_path, capsys):
    """--record-dir keeps results.json and table.md apart from the checkpoints: once --out-dir is gone, a rerun
    with another length penalty trains and translates nothing and says why, and --test is refused in one line."""
    data = make_toy_task(tmp_path / "toy", n_train=120, n_valid=16)
    out, record = tmp_path / "runs", tmp_path / "record"
    argv = [data, "--candidates", "quickstart", "--minutes", "5", "--lenpens", "1.0", "--precision", "fp32",
            "--out-dir", out, "--record-dir", record, f"--train-args={TINY}"]
    assert call(search, argv) == 0
    assert (record / "table.md").is_file() and not (out / "results.json").exists()
    runs = json.loads((record / "results.json").read_text())["runs"]
    assert set(runs["quickstart"]["valid_bleu"]) == {"best/lenpen 1.0", "average/lenpen 1.0",
                                                     "wide_average/lenpen 1.0"}
    shutil.rmtree(out)

    capsys.readouterr()
    more = [str(a) for a in argv]
    more[more.index("1.0")] = "1.0,1.4"
    assert call(search, more) == 0
    printed = capsys.readouterr().out
    assert not [line for line in printed.splitlines() if line.startswith("$ ")]  # nothing trained or translated
    assert "quickstart: its best checkpoints are gone" in printed and "not scored with lenpen 1.4" in printed
    assert json.loads((record / "results.json").read_text())["runs"] == runs

    assert call(search, [*argv, "--test"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--test: the checkpoints of the best setting on valid (quickstart" in err[0], err


def test_unknown_candidate_is_a_usage_error(tmp_path, capsys):
    assert call(search, [tmp_path, "--candidates", "quickstart,bigger"]) == 2
    assert "bigger" in capsys.readouterr().err


@pytest.mark.parametrize("record", sorted(p.name for p in RECORDS.iterdir()))
def test_each_committed_record_shows_the_table_its_results_make(record):
    """studies/recipes/record/*/table.md is what the search writes from the results.json beside it (so the README's
    figures, quoted from the tables, rest on the records)."""
    results = RECORDS / record / "results.json"
    table = Table(results, json.loads(results.read_text(encoding="utf-8"))["settings"])
    assert markdown(table) == (RECORDS / record / "table.md").read_text(encoding="utf-8")
