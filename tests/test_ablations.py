"""examples/ablations.py on a toy task: two variants, a few updates each. Results are appended as
each variant finishes, a rerun skips them, and the Markdown table holds one row per variant."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.train_toy_data import make_toy_task

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "ablations.py"
TINY = ("--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32 --decoder-embed-dim 32 "
        "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --num-threads 1 --log-format none")


def load_script():
    spec = importlib.util.spec_from_file_location("ablations", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ablations"] = module  # dataclasses resolve string annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def call(module, argv: list[str]) -> int:
    try:
        module.main([str(a) for a in argv])
    except SystemExit as e:
        return e.code or 0
    return 0


@pytest.mark.slow
def test_two_variants_table_and_rerun_skips(tmp_path, capsys):
    module = load_script()
    data = make_toy_task(tmp_path / "toy", n_train=120, n_valid=16)
    out = tmp_path / "runs"
    argv = [data, "--variants", "base,learned_positions", "--max-update", "5", "--warmup-updates", "2",
            "--max-tokens", "256", "--gen-subset", "valid", "--out-dir", out, f"--train-args={TINY}"]
    assert call(module, argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert list(results) == ["base", "learned_positions"]
    for name, row in results.items():
        assert row["num_updates"] == 5 and row["dev_ppl"] > 1 and row["test_bleu"] is not None
        assert row["params"] > 0 and "--max-update 5" in row["train_command"]
    # learned positions add a table of trained vectors: more parameters than sinusoids
    assert results["learned_positions"]["params"] > results["base"]["params"]
    assert "--positional learned" in results["learned_positions"]["train_command"]
    table = (out / "table.md").read_text()
    assert table.count("\n") == 4 and "| base |" in table and "| learned_positions |" in table
    assert table in capsys.readouterr().out

    assert call(module, argv) == 0  # the rerun trains nothing
    assert capsys.readouterr().out.count("skipped") == 2
    assert json.loads((out / "results.json").read_text()) == results


def test_unknown_variant_is_a_usage_error(tmp_path, capsys):
    module = load_script()
    assert call(module, [tmp_path, "--variants", "base,heads_3"]) == 2
    assert "heads_3" in capsys.readouterr().err
