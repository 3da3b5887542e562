"""The benchmark suite stays runnable: every benchmark `python -m benchmarks list` names runs on tiny settings (its
``tiny`` arguments, filled with a toy model and data) and prints its figures; `list` names every script of
benchmarks/, so none is orphaned; `--record` appends its row to the section of the record it belongs to. Each
benchmark runs through the real entry point in a fresh process, as a user runs it from the repository's root."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ is run from the repository's root, not installed
    sys.path.insert(0, str(ROOT))

from benchmarks import BENCHMARKS, HELPERS  # noqa: E402

# one thread per benchmark process: the tiny runs are too small to gain from more, and a run whose OpenMP threads
# share the cores with other work can be many times slower
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def benchmarks_command(*argv: object, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks", *map(str, argv)], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


def write_shared_data(folder: Path, raw: Path) -> Path:
    """``folder`` laid out as ../shared/data holds Multi30k (train, val, test_2016_flickr), from toy raw text."""
    multi30k = folder / "multi30k"
    multi30k.mkdir(parents=True)
    for split, source in (("train", "train"), ("val", "test"), ("test_2016_flickr", "test")):
        for lang in ("en", "de"):
            with gzip.open(multi30k / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write((raw / f"{source}.{lang}").read_text(encoding="utf-8"))
    return folder


@pytest.fixture(scope="module")
def toy(exported_model, tmp_path_factory) -> dict[str, str]:
    """What the benchmarks' ``tiny`` arguments name: a toy model, its data-bin, its raw text (train, valid, test),
    a ../shared/data look-alike."""
    root = tmp_path_factory.mktemp("benchmarks_toy")
    raw = root / "raw"
    raw.mkdir()
    for split, source in (("train", "train"), ("valid", "test"), ("test", "test")):
        for lang in ("en", "de"):
            shutil.copy(exported_model.raw / f"{source}.{lang}", raw / f"{split}.{lang}")
    return {"data": str(exported_model.data), "checkpoint": str(exported_model.pair[-1]),
            "model": str(exported_model.folder), "raw": str(raw),
            "shared": str(write_shared_data(root / "shared", raw))}


@pytest.mark.slow
@pytest.mark.parametrize("entry", BENCHMARKS, ids=lambda entry: entry.name)
def test_every_benchmark_runs_on_tiny_settings(entry, toy, tmp_path):
    argv = [word.format(**toy, work=tmp_path) for word in entry.tiny]
    done = benchmarks_command("run", entry.name, *argv)
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]  # the runner's line of figures: what --record would append
    assert last.startswith(f"{entry.name}: ") and re.search(r"\d", last.partition(": ")[2]), done.stdout[-2000:]


def test_list_names_every_script_of_benchmarks():
    done = benchmarks_command("list", timeout=60)
    assert done.returncode == 0, done.stderr
    listed = set(done.stdout.split())
    scripts = {p.stem for p in (ROOT / "benchmarks").glob("*.py")} - {"__init__", "__main__"}
    assert scripts - listed == set(), "scripts `list` does not name: add them to BENCHMARKS or HELPERS"
    assert {e.name for e in BENCHMARKS} | set(HELPERS) == scripts  # and the table names no script that is gone
    for entry in BENCHMARKS:
        assert entry.compares and entry.needs and entry.name in done.stdout


@pytest.fixture
def corpus_args(tmp_path) -> list[str]:
    """make_large_corpus's arguments for a corpus of a few pairs: the quickest benchmark with a data argument."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "test"):
        (raw / f"{split}.en").write_text("a small house .\nthe dog runs .\n", encoding="utf-8")
        (raw / f"{split}.de").write_text("ein kleines Haus .\nder Hund rennt .\n", encoding="utf-8")
    return ["--pairs", "5", "--out", str(tmp_path / "corpus"), "--data", str(write_shared_data(tmp_path / "d", raw))]


ROW = re.compile(r"^\| \d{4}-\d\d-\d\d \| [^|]*\d+-core[^|]*torch [^|]+ \| ([0-9a-f]{4,}(\+dirty)?|-) "
                 r"\| `python -m benchmarks run make_large_corpus --pairs 5 [^`]*` \| 5 pairs in [^|]+ \|$")


def test_record_appends_a_row_to_the_section_of_the_benchmark(tmp_path, corpus_args):
    results = tmp_path / "RESULTS.md"
    before = ("# Measurements\n\nIntro.\n\n## make_large_corpus\n\nWhat it measures.\n\n"
              "| date | machine | commit | command | figures |\n|---|---|---|---|---|\n"
              "| 2026-11-22 | 2-core AMD EPYC | abc1234 | `old` | 300k pairs in 10 s |\n\n"
              "## serve_load\n\n| date | machine | commit | command | figures |\n|---|---|---|---|---|\n"
              "| 2026-11-27 | 2-core AMD EPYC | def5678 | `x` | y |\n")
    results.write_text(before, encoding="utf-8")
    done = benchmarks_command("run", "make_large_corpus", *corpus_args, "--record", "--results", results, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = results.read_text(encoding="utf-8").splitlines()
    old = lines.index("| 2026-11-22 | 2-core AMD EPYC | abc1234 | `old` | 300k pairs in 10 s |")
    assert ROW.match(lines[old + 1]), lines[old + 1]  # right under the section's last row
    assert [line for k, line in enumerate(lines) if k != old + 1] == before.splitlines()  # nothing else changed


def test_record_makes_the_section_at_the_end_when_missing(tmp_path, corpus_args):
    results = tmp_path / "RESULTS.md"
    real = ROOT / "benchmarks" / "RESULTS.md"
    before = real.read_text(encoding="utf-8") if real.is_file() else "# Measurements\n\n## quickstart\n\nText.\n"
    before = re.sub(r"^## make_large_corpus$", "## make_large_corpus (renamed for this test)", before, flags=re.M)
    results.write_text(before, encoding="utf-8")
    done = benchmarks_command("run", "make_large_corpus", *corpus_args, "--record", f"--results={results}", timeout=120)
    assert done.returncode == 0, done.stderr
    after = results.read_text(encoding="utf-8")
    assert after.startswith(before.rstrip("\n") + "\n\n## make_large_corpus\n\n| date | machine | commit | command "
                            "| figures |\n|---|---|---|---|---|\n")
    assert ROW.match(after.splitlines()[-1]), after.splitlines()[-1]


def test_a_missing_input_is_one_line_naming_its_flag(tmp_path):
    done = benchmarks_command("run", "make_large_corpus", "--out", tmp_path / "corpus", "--data", tmp_path / "none",
                              timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"make_large_corpus: --data {tmp_path / 'none'}: not found; the shared "
                                                "data folder (Multi30k, Bible, WMT newstest, IWSLT'14)"]
    assert not (tmp_path / "corpus").exists()
    unknown = benchmarks_command("run", "measure_process", timeout=60)
    assert unknown.returncode == 2 and "a helper, not a benchmark" in unknown.stderr
