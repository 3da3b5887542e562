"""studies/ablations (python -m studies.ablations): runs on a toy task (the base with two seeds, a variant, results
kept as each run finishes, a rerun trains nothing), the table's comparison with the base and with the paper's
claims, and the committed record, whose table comes back from its results.json and compressed translations."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sys
import threading

import pytest

from nmt.errors import NmtError
from studies import commands
from studies.ablations import run as study, translations
from studies.ablations.claims import CLAIMS
from studies.ablations.doc_page import DOC_BEGIN, DOC_END, with_table
from studies.ablations.job import AblationJob
from studies.ablations.significance import SIGNIFICANCE, bleu_p_values, compare, within_noise
from studies.ablations.table import markdown
from studies.ablations.variants import VARIANTS
from studies.record import Table
from tests.example_scripts import call
from tests.repo_scripts import ROOT
from tests.shared_paths import MULTI30K
from tests.train_toy_data import make_toy_task

STUDY = ROOT / "studies" / "ablations"

TINY = ("--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32 --decoder-embed-dim 32 "
        "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --num-threads 1 --log-format none")


@pytest.mark.slow
def test_base_seeds_a_variant_table_and_rerun_skips(tmp_path, capsys):
    data = make_toy_task(tmp_path / "toy", n_train=120, n_valid=16)
    out, kept = tmp_path / "runs", tmp_path / "record"
    argv = [data, "--variants", "learned_positions", "--max-update", "5", "--warmup-updates", "2",
            "--max-tokens", "256", "--gen-subset", "valid", "--precision", "fp32", "--out-dir", out,
            "--record-dir", kept, f"--train-args={TINY}", "--jobs", "2"]
    assert call(study, argv) == 0
    shown = capsys.readouterr().out
    assert f"[base/seed2] $ {commands.tool('nmt-train')}" in shown  # two runs at once: each line says whose it is
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
    # each run's translations are in the record's archive, one line per validation sentence
    archived = translations.read_archive(kept / "translations.tar.xz")
    assert sorted(archived) == sorted(f"{key.replace('/seed', '.seed')}.valid.txt" for key in runs)
    assert all(len(text.decode().splitlines()) == 16 for text in archived.values())
    table = (kept / "table.md").read_text()
    assert "| base |" in table and "| learned_positions |" in table and "| E | learned_positions |" in table
    assert "positional embedding: 4.92 / 25.7" in table  # the paper's figures beside the row
    assert re.search(r"\| learned_positions \|[^\n]* \| [01]\.\d{3} \| positional", table)  # its bootstrap p
    assert table in shown and "--num-threads 1" in runs["base/seed1"]["train_command"]

    assert call(study, argv) == 0  # the rerun trains nothing
    assert capsys.readouterr().out.count("skipped") == len(runs)
    assert json.loads((kept / "results.json").read_text())["runs"] == runs

    # other settings into the same folder: refused, nothing changed
    assert call(study, [*argv[:4], "6", *argv[5:]]) == 2
    assert "other settings" in capsys.readouterr().err


def fake_runs(monkeypatch, ppl: dict[str, float], fails: str = "") -> list[str]:
    """Replace training by records of the given dev perplexities (BLEU far from the base's); the order runs
    started in."""
    started, failed = [], threading.Event()

    def run_once(job, name, seed):
        started.append(f"{name}/seed{seed}")
        if name == fails:
            failed.set()
            raise NmtError(f"nmt-train failed for {name}")
        if fails and name != "base":
            failed.wait(10)  # finish after the failure, so the test does not depend on which thread runs first
        return record(name, seed, ppl[name] + (0.2 if name == "base" and seed == 2 else 0.0), 20.0 + len(started))

    monkeypatch.setattr(study, "run_once", run_once)
    return started


def test_second_seeds_follow_a_complete_base_with_two_jobs(tmp_path, monkeypatch):
    started = fake_runs(monkeypatch, {"base": 5.0, "heads_1": 5.1, "heads_8": 6.0})
    argv = [tmp_path, "--variants", "heads_1,heads_8", "--jobs", "2", "--out-dir", tmp_path / "runs"]
    assert call(study, argv) == 0
    # base 5.0 / 5.2: heads_1 (5.1) is within its spread, heads_8 (6.0) is not
    assert started[:2] == ["base/seed1", "base/seed2"] and started[-1] == "heads_1/seed2"
    assert sorted(started[2:4]) == ["heads_1/seed1", "heads_8/seed1"] and len(started) == 5
    runs = json.loads((tmp_path / "runs" / "results.json").read_text())["runs"]
    assert set(runs) == set(started)
    table = (tmp_path / "runs" / "table.md").read_text()
    assert call(study, [*argv[:2], "heads_8", *argv[3:]]) == 0  # a piece of the study: the table stays whole
    assert (tmp_path / "runs" / "table.md").read_text() == table and "| heads_1 |" in table


def test_the_table_is_written_into_the_doc_page_between_its_markers(tmp_path, monkeypatch):
    fake_runs(monkeypatch, {"base": 5.0, "heads_1": 6.0})
    page = tmp_path / "ablations.md"
    page.write_text(f"# Study\n\n{DOC_BEGIN}\nan old table\n{DOC_END}\n\nprose after it\n")
    argv = [tmp_path, "--variants", "heads_1", "--out-dir", tmp_path / "runs", "--doc", page]
    assert call(study, argv) == 0
    table = (tmp_path / "runs" / "table.md").read_text()
    assert page.read_text() == f"# Study\n\n{DOC_BEGIN}\n{table.rstrip()}\n{DOC_END}\n\nprose after it\n"
    assert call(study, argv) == 0 and page.read_text().count("| heads_1 |") == 1  # rewritten, not appended


def test_the_study_page_shows_the_recorded_table():
    page = (STUDY / "README.md").read_text(encoding="utf-8")
    recorded = (STUDY / "record" / "table.md").read_text(encoding="utf-8")
    assert with_table(page, recorded, "studies/ablations/README.md") == page, (
        "studies/ablations/README.md shows another table than studies/ablations/record/table.md: run python -m "
        "studies.ablations data-bin/multi30k_en_de --precision bf16 --out-dir /work/ablations-runs --record-dir "
        "studies/ablations/record --variants base --doc studies/ablations/README.md")


@pytest.mark.slow
@pytest.mark.skipif(not (MULTI30K / "test_2016_flickr.de.gz").is_file(), reason="needs the shared Multi30k data")
def test_the_committed_record_gives_back_its_table(tmp_path, monkeypatch, capsys):
    """The record keeps what its table needs: the study's own command, with nothing left to train, rewrites
    table.md from results.json and the compressed translations (the paired bootstrap's p-values included) as it
    is committed."""
    monkeypatch.setattr("nmt.data.data_dir.resolve_langs", lambda data, src, tgt: ("en", "de"))
    monkeypatch.chdir(tmp_path)
    raw = tmp_path / "data-bin" / "multi30k_en_de" / "raw"  # the record's settings name this folder
    raw.mkdir(parents=True)
    with gzip.open(MULTI30K / "test_2016_flickr.de.gz", "rb") as references:
        (raw / "test.de").write_bytes(references.read())
    record = tmp_path / "record"
    record.mkdir()
    for name in ("results.json", "translations.tar.xz"):
        shutil.copy(STUDY / "record" / name, record / name)
    argv = ["data-bin/multi30k_en_de", "--precision", "bf16", "--variants", "base", "--out-dir", tmp_path / "runs",
            "--record-dir", record]
    assert call(study, argv) == 0
    assert "base, seed 2: already in" in capsys.readouterr().out and not (tmp_path / "runs").exists()
    assert (record / "table.md").read_text(encoding="utf-8") == (STUDY / "record" / "table.md").read_text("utf-8")


def test_translations_are_archived_the_same_way_and_earlier_plain_files_are_read(tmp_path):
    job = AblationJob(out_dir=str(tmp_path / "runs"), record_dir=str(tmp_path / "record"))
    translations.keep(job, "heads_1", 1, ["zwei", "eins"])
    translations.keep(job, "base", 1, ["eins", "zwei"])
    archive = tmp_path / "record" / translations.ARCHIVE
    first = archive.read_bytes()
    translations.keep(job, "heads_1", 1, ["zwei", "eins"])  # the same translations again: the same bytes
    assert archive.read_bytes() == first
    assert translations.hypotheses(job, "base", 1) == ["eins", "zwei"]
    assert translations.hypotheses(job, "heads_8", 1) is None  # none kept
    plain = tmp_path / "record" / "translations" / "heads_8.seed1.test.txt"  # as an earlier version kept them
    plain.parent.mkdir()
    plain.write_text("drei\nvier\n", encoding="utf-8")
    assert translations.hypotheses(job, "heads_8", 1) == ["drei", "vier"]


@pytest.mark.parametrize("text", [None, "# Study without the markers\n"])
def test_a_doc_page_without_its_markers_is_refused_before_any_run(tmp_path, monkeypatch, capsys, text):
    started = fake_runs(monkeypatch, {"base": 5.0, "heads_1": 6.0})
    page = tmp_path / "ablations.md"
    if text is not None:
        page.write_text(text)
    assert call(study, [tmp_path, "--variants", "heads_1", "--out-dir", tmp_path / "runs", "--doc", page]) == 2
    assert f"--doc {page}" in capsys.readouterr().err and not started
    assert not (tmp_path / "runs").exists() and (text is None or page.read_text() == text)


def test_a_failed_run_keeps_the_others_and_starts_no_new_one(tmp_path, monkeypatch, capsys):
    started = fake_runs(monkeypatch, {"base": 5.0, "heads_1": 5.1, "heads_8": 5.1}, fails="heads_1")
    argv = [tmp_path, "--variants", "heads_1,heads_8", "--jobs", "2", "--out-dir", tmp_path / "runs"]
    assert call(study, argv) == 1
    assert "nmt-train failed for heads_1" in capsys.readouterr().err
    runs = json.loads((tmp_path / "runs" / "results.json").read_text())["runs"]
    assert set(runs) == {"base/seed1", "base/seed2", "heads_8/seed1"}  # heads_8's second seed is not started
    assert "heads_8/seed2" not in started


def record(name: str, seed: int, ppl: float, bleu: float) -> dict:
    return {"variant": name, "seed": seed, "params": 8e6, "dev_ppl": ppl, "dev_loss_bits": 4.0, "best_update": 900,
            "num_updates": 1000, "test_bleu": bleu, "test_chrf": 60.0, "train_seconds": 600.0}


def table_of(tmp_path, records: list[dict]):
    table = Table(tmp_path / "results.json", {"max_update": 1000})
    for r in records:
        table.add(f"{r['variant']}/seed{r['seed']}", r)
    return table


def test_two_studies_sharing_a_record_keep_each_others_runs(tmp_path):
    """Two drivers of other --variants on one record: each read the file before the other's run finished."""
    first = Table(tmp_path / "results.json", {"max_update": 1000})
    second = Table(tmp_path / "results.json", {"max_update": 1000})
    first.add("ls_0/seed1", record("ls_0", 1, 6.3, 37.8))
    second.add("dropout_0.1/seed1", record("dropout_0.1", 1, 5.9, 38.0))
    first.add("ls_0/seed2", record("ls_0", 2, 6.2, 37.5))
    saved = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert sorted(saved) == ["dropout_0.1/seed1", "ls_0/seed1", "ls_0/seed2"]
    assert sorted(first.runs) == sorted(saved)


def test_comparison_uses_the_base_seed_spread(tmp_path):
    base = [record("base", 1, 10.0, 35.0), record("base", 2, 10.4, 35.6)]  # spread: ppl 0.4, BLEU 0.6
    table = table_of(tmp_path, [*base, record("heads_1", 1, 11.0, 34.0), record("heads_16", 1, 10.1, 35.5),
                                        record("learned_positions", 1, 10.3, 35.2)])
    assert compare(table, "heads_1") == {"dev_ppl": "worse", "test_bleu": "worse"}
    assert compare(table, "heads_16") == {"dev_ppl": "level", "test_bleu": "level"}
    assert within_noise(table, "heads_16") and not within_noise(table, "heads_1")
    text = markdown(table, ["base", "heads_1", "heads_16", "learned_positions"], "test")
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
    base = [record("base", 1, 10.0, 35.0), record("base", 2, 10.2, 35.2)]
    table = table_of(tmp_path, [*base, record(name, 1, ppl, bleu)])
    claim = next(c for c in CLAIMS if c.row == row and name in {n for p in c.parts for n in p.names})
    assert claim.judge({name: compare(table, name)}) == said


def test_every_variant_is_checked_by_its_row(tmp_path):
    rows = {v.row for v in VARIANTS.values()}
    assert {"A", "B", "C", "D", "E"} <= rows
    assert all(v.flags or name == "base" for name, v in VARIANTS.items())


def test_unknown_variant_is_a_usage_error(tmp_path, capsys):
    assert call(study, [tmp_path, "--variants", "base,heads_3"]) == 2
    assert "heads_3" in capsys.readouterr().err


def test_bleu_needs_a_paired_bootstrap_to_differ(tmp_path, monkeypatch):
    """A BLEU gap beyond the base's seed spread is still "level" when resampling the test sentences cannot tell
    the two translations apart; a variation whose every sentence is better is "better"."""
    monkeypatch.setattr("nmt.data.data_dir.resolve_langs", lambda data, src, tgt: ("en", "de"))
    data = tmp_path / "data"
    (data / "raw").mkdir(parents=True)
    refs = [f"ein mann Nummer {i} fährt mit dem Fahrrad über die Straße ." for i in range(60)]
    (data / "raw" / "test.de").write_text("\n".join(refs) + "\n", encoding="utf-8")
    job = AblationJob(data=str(data), out_dir=str(tmp_path / "runs"))
    worse = [" ".join(r.split()[:5]) for r in refs]
    mixed = [r if i % 2 else " ".join(r.split()[:4]) for i, r in enumerate(refs)]
    close = [refs[0], *worse[1:]]  # one sentence better than the base
    for name, hyps in (("base", worse), ("heads_1", refs), ("heads_8", mixed), ("heads_16", close),
                       ("learned_positions", worse)):
        translations.keep(job, name, 1, hyps)
    assert translations.hypotheses(job, "heads_8", 1) == mixed
    # a record copied from the docs, its translations lost with its machine: the p-value it holds
    copied = {**record("key_dim_16", 1, 10.1, 34.0), "bleu_p": 0.197, "train_seconds": None, "note": "from the docs"}
    table = table_of(tmp_path, [record("base", 1, 10.0, 35.0), record("base", 2, 10.2, 35.2),
                                        record("heads_1", 1, 10.1, 60.0), record("heads_16", 1, 10.1, 36.0),
                                        record("learned_positions", 1, 10.1, 36.0), copied])
    p = bleu_p_values(job, table, ["base", "heads_1", "heads_8", "heads_16", "learned_positions", "key_dim_16"])
    # heads_8 has translations but no finished record
    assert set(p) == {"heads_1", "heads_16", "learned_positions", "key_dim_16"} and p["key_dim_16"] == 0.197
    assert p["heads_1"] < 0.05 and p["heads_16"] > SIGNIFICANCE and p["learned_positions"] == 1.0
    assert compare(table, "heads_1", p["heads_1"])["test_bleu"] == "better"
    assert compare(table, "heads_16", p["heads_16"])["test_bleu"] == "level"
    assert compare(table, "heads_16")["test_bleu"] == "better"  # the seed spread alone would say so
    text = markdown(table, ["base", "heads_1", "heads_16"], "test", p)
    assert f"| {p['heads_16']:.3f} |" in text
    copied_row = markdown(table, ["base", "key_dim_16"], "test", p)
    assert "| 0.197 |" in copied_row and "| - (all cores) |" in copied_row  # its train time is not known
    assert copied_row.endswith("Runs with a note:\n\n- key_dim_16/seed1: from the docs\n")


def test_best_translations_are_in_sentence_order():
    output = "S-1\tb\nD-1\t-0.2\tzwei\nH-0\t-0.1\teins@@ s\nD-0\t-0.1\teins\nBLEU = 1.0\n"
    assert translations.best_translations(output) == ["eins", "zwei"]


def test_a_training_stopped_by_a_signal_is_not_scored_as_finished(capsys):
    """nmt-train exits 0 when SIGTERM stops it (it saves checkpoint_last.pt to resume from); the study must not
    translate and record that half-trained model as a finished run."""
    stopped = ("nmt-train: stopped by SIGTERM after update 700; saved runs/base/seed1/checkpoint_last.pt; run the "
               "same command again to resume")
    with pytest.raises(NmtError, match="stopped by SIGTERM after update 700; .*not scored"):
        commands.train_to_end([sys.executable, "-c", f"print('epoch 6 ...'); print({stopped!r})"])
    commands.train_to_end([sys.executable, "-c", "print('done training: reached --max-update 3000')"])  # no error
    assert "done training" in capsys.readouterr().out
