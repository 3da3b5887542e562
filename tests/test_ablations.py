"""examples/ablations.py: runs on a toy task (the base with two seeds, a variant, results kept as each run
finishes, a rerun trains nothing), and the table's comparison with the base and with the paper's claims."""

from __future__ import annotations

import json
import re
import sys
import threading

import pytest

from nmt.errors import NmtError
from tests.example_scripts import call, load_script
from tests.repo_scripts import ROOT
from tests.train_toy_data import make_toy_task

TINY = ("--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32 --decoder-embed-dim 32 "
        "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --num-threads 1 --log-format none")


@pytest.mark.slow
def test_base_seeds_a_variant_table_and_rerun_skips(tmp_path, capsys):
    module = load_script("ablations")
    data = make_toy_task(tmp_path / "toy", n_train=120, n_valid=16)
    out, kept = tmp_path / "runs", tmp_path / "record"
    argv = [data, "--variants", "learned_positions", "--max-update", "5", "--warmup-updates", "2",
            "--max-tokens", "256", "--gen-subset", "valid", "--precision", "fp32", "--out-dir", out,
            "--record-dir", kept, f"--train-args={TINY}", "--jobs", "2"]
    assert call(module, argv) == 0
    shown = capsys.readouterr().out
    assert f"[base/seed2] $ {module.tool('nmt-train')}" in shown  # two runs at once: each line says whose it is
    saved = json.loads((kept / "results.json").read_text())
    runs = saved["runs"]
    assert saved["settings"]["max_update"] == 5 and saved["settings"]["bf16"] is False
    assert {"base/seed1", "base/seed2", "learned_positions/seed1"} <= set(runs)  # the base always, with 2 seeds
    for record in runs.values():
        assert record["num_updates"] == 5 and record["dev_ppl"] > 1 and record["test_bleu"] is not None
        assert 0 < record["best_update"] <= 5 and "--bf16" not in record["train_command"]
        assert "checkpoint_best.pt" in record["generate_command"]
    assert runs["base/seed1"]["train_command"] != runs["base/seed2"]["train_command"]  # --seed 1 / --seed 2
    # learned positions add a table of trained vectors: more parameters than sinusoids
    assert runs["learned_positions/seed1"]["params"] > runs["base/seed1"]["params"]
    assert "--positional learned" in runs["learned_positions/seed1"]["train_command"]
    assert not (out / "results.json").exists() and (out / "base" / "seed1" / "checkpoint_best.pt").is_file()
    for key in runs:  # each run's translations are in the record, one line per validation sentence
        name, seed = key.split("/seed")
        assert len((kept / "translations" / f"{name}.seed{seed}.valid.txt").read_text().splitlines()) == 16
    table = (kept / "table.md").read_text()
    assert "| base |" in table and "| learned_positions |" in table and "| E | learned_positions |" in table
    assert "positional embedding: 4.92 / 25.7" in table  # the paper's figures beside the row
    assert re.search(r"\| learned_positions \|[^\n]* \| [01]\.\d{3} \| positional", table)  # its bootstrap p
    assert table in shown and "--num-threads 1" in runs["base/seed1"]["train_command"]

    assert call(module, argv) == 0  # the rerun trains nothing
    assert capsys.readouterr().out.count("skipped") == len(runs)
    assert json.loads((kept / "results.json").read_text())["runs"] == runs

    # other settings into the same folder: refused, nothing changed
    assert call(module, [*argv[:4], "6", *argv[5:]]) == 2
    assert "other settings" in capsys.readouterr().err


def fake_runs(module, monkeypatch, ppl: dict[str, float], fails: str = "") -> list[str]:
    """Replace training by records of the given dev perplexities (BLEU far from the base's); the order runs
    started in."""
    started, failed = [], threading.Event()

    def run_once(job, name, seed):
        started.append(f"{name}/seed{seed}")
        if name == fails:
            failed.set()
            raise module.NmtError(f"nmt-train failed for {name}")
        if fails and name != "base":
            failed.wait(10)  # finish after the failure, so the test does not depend on which thread runs first
        return record(name, seed, ppl[name] + (0.2 if name == "base" and seed == 2 else 0.0), 20.0 + len(started))

    monkeypatch.setattr(module, "run_once", run_once)
    return started


def test_second_seeds_follow_a_complete_base_with_two_jobs(tmp_path, monkeypatch):
    module = load_script("ablations")
    started = fake_runs(module, monkeypatch, {"base": 5.0, "heads_1": 5.1, "heads_8": 6.0})
    argv = [tmp_path, "--variants", "heads_1,heads_8", "--jobs", "2", "--out-dir", tmp_path / "runs"]
    assert call(module, argv) == 0
    # base 5.0 / 5.2: heads_1 (5.1) is within its spread, heads_8 (6.0) is not
    assert started[:2] == ["base/seed1", "base/seed2"] and started[-1] == "heads_1/seed2"
    assert sorted(started[2:4]) == ["heads_1/seed1", "heads_8/seed1"] and len(started) == 5
    runs = json.loads((tmp_path / "runs" / "results.json").read_text())["runs"]
    assert set(runs) == set(started)
    table = (tmp_path / "runs" / "table.md").read_text()
    assert call(module, [*argv[:2], "heads_8", *argv[3:]]) == 0  # a piece of the study: the table stays whole
    assert (tmp_path / "runs" / "table.md").read_text() == table and "| heads_1 |" in table


def test_the_table_is_written_into_the_doc_page_between_its_markers(tmp_path, monkeypatch):
    module = load_script("ablations")
    fake_runs(module, monkeypatch, {"base": 5.0, "heads_1": 6.0})
    page = tmp_path / "ablations.md"
    page.write_text(f"# Study\n\n{module.DOC_BEGIN}\nan old table\n{module.DOC_END}\n\nprose after it\n")
    argv = [tmp_path, "--variants", "heads_1", "--out-dir", tmp_path / "runs", "--doc", page]
    assert call(module, argv) == 0
    table = (tmp_path / "runs" / "table.md").read_text()
    assert page.read_text() == f"# Study\n\n{module.DOC_BEGIN}\n{table.rstrip()}\n{module.DOC_END}\n\nprose after it\n"
    assert call(module, argv) == 0 and page.read_text().count("| heads_1 |") == 1  # rewritten, not appended


def test_the_ablations_page_shows_the_recorded_table():
    module = load_script("ablations")
    page = (ROOT / "docs" / "ablations.md").read_text(encoding="utf-8")
    recorded = (ROOT / "docs" / "ablations" / "table.md").read_text(encoding="utf-8")
    assert module.with_table(page, recorded, "docs/ablations.md") == page, (
        "docs/ablations.md shows another table than docs/ablations/table.md: run python examples/ablations.py "
        "data-bin/multi30k_en_de --precision bf16 --out-dir /work/ablations-runs --record-dir docs/ablations "
        "--variants base --doc docs/ablations.md")


@pytest.mark.parametrize("text", [None, "# Study without the markers\n"])
def test_a_doc_page_without_its_markers_is_refused_before_any_run(tmp_path, monkeypatch, capsys, text):
    module = load_script("ablations")
    started = fake_runs(module, monkeypatch, {"base": 5.0, "heads_1": 6.0})
    page = tmp_path / "ablations.md"
    if text is not None:
        page.write_text(text)
    assert call(module, [tmp_path, "--variants", "heads_1", "--out-dir", tmp_path / "runs", "--doc", page]) == 2
    assert f"--doc {page}" in capsys.readouterr().err and not started
    assert not (tmp_path / "runs").exists() and (text is None or page.read_text() == text)


def test_a_failed_run_keeps_the_others_and_starts_no_new_one(tmp_path, monkeypatch, capsys):
    module = load_script("ablations")
    started = fake_runs(module, monkeypatch, {"base": 5.0, "heads_1": 5.1, "heads_8": 5.1}, fails="heads_1")
    argv = [tmp_path, "--variants", "heads_1,heads_8", "--jobs", "2", "--out-dir", tmp_path / "runs"]
    assert call(module, argv) == 1
    assert "nmt-train failed for heads_1" in capsys.readouterr().err
    runs = json.loads((tmp_path / "runs" / "results.json").read_text())["runs"]
    assert set(runs) == {"base/seed1", "base/seed2", "heads_8/seed1"}  # heads_8's second seed is not started
    assert "heads_8/seed2" not in started


def record(name: str, seed: int, ppl: float, bleu: float) -> dict:
    return {"variant": name, "seed": seed, "params": 8e6, "dev_ppl": ppl, "dev_loss_bits": 4.0, "best_update": 900,
            "num_updates": 1000, "test_bleu": bleu, "test_chrf": 60.0, "train_seconds": 600.0}


def table_of(module, tmp_path, records: list[dict]):
    table = module.Table(tmp_path / "results.json", {"max_update": 1000})
    for r in records:
        table.add(f"{r['variant']}/seed{r['seed']}", r)
    return table


def test_two_studies_sharing_a_record_keep_each_others_runs(tmp_path):
    """Two drivers of other --variants on one record: each read the file before the other's run finished."""
    module = load_script("ablations")
    first = module.Table(tmp_path / "results.json", {"max_update": 1000})
    second = module.Table(tmp_path / "results.json", {"max_update": 1000})
    first.add("ls_0/seed1", record("ls_0", 1, 6.3, 37.8))
    second.add("dropout_0.1/seed1", record("dropout_0.1", 1, 5.9, 38.0))
    first.add("ls_0/seed2", record("ls_0", 2, 6.2, 37.5))
    saved = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert sorted(saved) == ["dropout_0.1/seed1", "ls_0/seed1", "ls_0/seed2"]
    assert sorted(first.runs) == sorted(saved)


def test_comparison_uses_the_base_seed_spread(tmp_path):
    module = load_script("ablations")
    base = [record("base", 1, 10.0, 35.0), record("base", 2, 10.4, 35.6)]  # spread: ppl 0.4, BLEU 0.6
    table = table_of(module, tmp_path, [*base, record("heads_1", 1, 11.0, 34.0), record("heads_16", 1, 10.1, 35.5),
                                        record("learned_positions", 1, 10.3, 35.2)])
    assert module.compare(table, "heads_1") == {"dev_ppl": "worse", "test_bleu": "worse"}
    assert module.compare(table, "heads_16") == {"dev_ppl": "level", "test_bleu": "level"}
    assert module.within_noise(table, "heads_16") and not module.within_noise(table, "heads_1")
    text = module.markdown(table, ["base", "heads_1", "heads_16", "learned_positions"], "test")
    assert "| base | " in text and "10.20 ± 0.20" in text and "35.30 ± 0.30" in text
    # A: 1 head is worse, but 16 heads are not: the paper's "too many heads" half fails, and the line says how
    assert ("heads: holds only in part (heads_16 is level on dev ppl; heads_16 is level on BLEU)." in text)
    assert "**E**: learned positional embeddings give nearly identical results to the sinusoids: holds." in text
    assert "**B**: reducing the attention key size d_k hurts model quality: not measured yet." in text


@pytest.mark.parametrize("row, name, ppl, bleu, said", [
    ("D", "ls_0", 8.0, 34.0, "holds"),  # label smoothing off: better perplexity, worse BLEU, as the paper says
    ("D", "ls_0", 8.0, 36.0, "holds only in part (ls_0 is better on BLEU)"),
    # one head with a worse perplexity but a better BLEU does not confirm "one head is worse"
    ("A", "heads_1", 11.0, 36.0, "holds only in part (heads_1 is better on BLEU)"),
    ("A", "heads_1", 9.0, 36.0, "does not hold here (heads_1 is better on dev ppl; heads_1 is better on BLEU)"),
])
def test_a_claim_holds_only_when_every_metric_agrees(tmp_path, row, name, ppl, bleu, said):
    module = load_script("ablations")
    base = [record("base", 1, 10.0, 35.0), record("base", 2, 10.2, 35.2)]
    table = table_of(module, tmp_path, [*base, record(name, 1, ppl, bleu)])
    claim = next(c for c in module.CLAIMS if c.row == row and name in {n for p in c.parts for n in p.names})
    assert claim.judge({name: module.compare(table, name)}) == said


def test_every_variant_is_checked_by_its_row(tmp_path):
    module = load_script("ablations")
    rows = {v.row for v in module.VARIANTS.values()}
    assert {"A", "B", "C", "D", "E"} <= rows
    assert all(v.flags or name == "base" for name, v in module.VARIANTS.items())


def test_unknown_variant_is_a_usage_error(tmp_path, capsys):
    module = load_script("ablations")
    assert call(module, [tmp_path, "--variants", "base,heads_3"]) == 2
    assert "heads_3" in capsys.readouterr().err


def test_bleu_needs_a_paired_bootstrap_to_differ(tmp_path, monkeypatch):
    """A BLEU gap beyond the base's seed spread is still "level" when resampling the test sentences cannot tell
    the two translations apart; a variation whose every sentence is better is "better"."""
    module = load_script("ablations")
    monkeypatch.setattr("nmt.data.data_dir.resolve_langs", lambda data, src, tgt: ("en", "de"))
    data = tmp_path / "data"
    (data / "raw").mkdir(parents=True)
    refs = [f"ein mann Nummer {i} fährt mit dem Fahrrad über die Straße ." for i in range(60)]
    (data / "raw" / "test.de").write_text("\n".join(refs) + "\n", encoding="utf-8")
    job = module.AblationJob(data=str(data), out_dir=str(tmp_path / "runs"))
    worse = [" ".join(r.split()[:5]) for r in refs]
    mixed = [r if i % 2 else " ".join(r.split()[:4]) for i, r in enumerate(refs)]
    close = [refs[0], *worse[1:]]  # one sentence better than the base
    for name, hyps in (("base", worse), ("heads_1", refs), ("heads_8", mixed), ("heads_16", close),
                       ("learned_positions", worse)):
        path = module.translations_path(job, name, 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(hyps) + "\n", encoding="utf-8")
    assert module.hypotheses(job, "heads_8", 1) == mixed
    # a record copied from the docs, its translations lost with its machine: the p-value it holds
    copied = {**record("key_dim_16", 1, 10.1, 34.0), "bleu_p": 0.197, "train_seconds": None, "note": "from the docs"}
    table = table_of(module, tmp_path, [record("base", 1, 10.0, 35.0), record("base", 2, 10.2, 35.2),
                                        record("heads_1", 1, 10.1, 60.0), record("heads_16", 1, 10.1, 36.0),
                                        record("learned_positions", 1, 10.1, 36.0), copied])
    p = module.bleu_p_values(job, table, ["base", "heads_1", "heads_8", "heads_16", "learned_positions", "key_dim_16"])
    # heads_8 has translations but no finished record
    assert set(p) == {"heads_1", "heads_16", "learned_positions", "key_dim_16"} and p["key_dim_16"] == 0.197
    assert p["heads_1"] < 0.05 and p["heads_16"] > module.SIGNIFICANCE and p["learned_positions"] == 1.0
    assert module.compare(table, "heads_1", p["heads_1"])["test_bleu"] == "better"
    assert module.compare(table, "heads_16", p["heads_16"])["test_bleu"] == "level"
    assert module.compare(table, "heads_16")["test_bleu"] == "better"  # the seed spread alone would say so
    text = module.markdown(table, ["base", "heads_1", "heads_16"], "test", p)
    assert f"| {p['heads_16']:.3f} |" in text
    copied_row = module.markdown(table, ["base", "key_dim_16"], "test", p)
    assert "| 0.197 |" in copied_row and "| - (all cores) |" in copied_row  # its train time is not known
    assert copied_row.endswith("Runs with a note:\n\n- key_dim_16/seed1: from the docs\n")


def test_best_translations_are_in_sentence_order():
    module = load_script("ablations")
    output = "S-1\tb\nD-1\t-0.2\tzwei\nH-0\t-0.1\teins@@ s\nD-0\t-0.1\teins\nBLEU = 1.0\n"
    assert module.best_translations(output) == ["eins", "zwei"]


def test_a_training_stopped_by_a_signal_is_not_scored_as_finished(capsys):
    """nmt-train exits 0 when SIGTERM stops it (it saves checkpoint_last.pt to resume from); the study must not
    translate and record that half-trained model as a finished run."""
    module = load_script("ablations")
    stopped = ("nmt-train: stopped by SIGTERM after update 700; saved runs/base/seed1/checkpoint_last.pt; run the "
               "same command again to resume")
    with pytest.raises(NmtError, match="stopped by SIGTERM after update 700; .*not scored"):
        module.train_to_end([sys.executable, "-c", f"print('epoch 6 ...'); print({stopped!r})"])
    module.train_to_end([sys.executable, "-c", "print('done training: reached --max-update 3000')"])  # no error
    assert "done training" in capsys.readouterr().out
