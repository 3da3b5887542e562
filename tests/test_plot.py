"""nmt-plot: a PNG from one or several nmt-train JSON logs, one-line errors for bad input."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.cli.plot import logs_as_flag, main
from nmt.plotting import read_log, run_curves

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_log(folder: Path, lr_peak: float = 1e-3, resumed: bool = False) -> Path:
    """A small train_log.jsonl in nmt-train's format: train_inner lines, epoch summaries, validations."""
    folder.mkdir(parents=True, exist_ok=True)
    records = []
    for update in range(10, 101, 10):
        loss = 12.0 / (1 + update / 30)
        records.append({"kind": "train_inner", "epoch": 1 + update // 50, "loss": loss, "nll_loss": loss,
                        "ppl": 2 ** loss, "num_updates": update, "lr": lr_peak * min(update / 50, 1.0)})
        if update % 50 == 0:
            records.append({"kind": "train", "epoch": update // 50, "loss": loss, "ppl": 2 ** loss,
                            "num_updates": update, "lr": lr_peak})
            records.append({"kind": "valid", "epoch": update // 50, "subset": "valid", "loss": loss + 0.3,
                            "ppl": 2 ** (loss + 0.3), "num_updates": update})
    if resumed:  # a resume re-logs update 100 with a different value: the later one counts
        records.append({**records[-3], "loss": 1.0})
    path = folder / "train_log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def call(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as e:
        return e.code or 0
    return 0


def test_one_run_writes_a_png(tmp_path, capsys):
    log = write_log(tmp_path / "run")
    out = tmp_path / "curves.png"
    assert call([str(log), "--output", str(out)]) == 0
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5000
    assert "wrote" in capsys.readouterr().out


def test_runs_overlay_from_folders_and_files_with_labels(tmp_path):
    write_log(tmp_path / "sin")
    learned = write_log(tmp_path / "learned", lr_peak=5e-4)
    out = tmp_path / "two.png"
    code = call([str(tmp_path / "sin"), str(learned), "--labels", "sinusoidal,learned", "--output", str(out),
                 "--linear-ppl", "--title", "positions"])
    assert code == 0
    assert out.read_bytes().startswith(PNG_MAGIC)


def test_curves_read_from_the_log(tmp_path):
    runs = run_curves(read_log(write_log(tmp_path / "r", resumed=True)), "r")
    assert runs.train_loss.updates == list(range(10, 101, 10))
    assert runs.train_loss.values[-1] == 1.0  # the resumed run's record replaced the first one
    assert runs.valid_loss.updates == [50, 100]
    assert runs.lr.values[4] == pytest.approx(1e-3)


def test_positional_logs_become_one_flag():
    argv = ["a.jsonl", "--output", "x.png", "b", "--logs", "c", "--linear-ppl", "plot.dpi=50"]
    assert logs_as_flag(argv) == ["--output", "x.png", "--linear-ppl", "plot.dpi=50", "--logs", "a.jsonl,b,c"]


def test_missing_log_is_one_line_error(tmp_path, capsys):
    code = call([str(tmp_path / "nowhere" / "train_log.jsonl"), "--output", str(tmp_path / "x.png")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "no such training log" in err and "nowhere" in err
    assert not (tmp_path / "x.png").exists()


def test_damaged_lines_are_skipped_with_a_warning_naming_file_and_line(tmp_path, capsys):
    """A line cut off by a kill (or mangled by hand) costs that line only, not the whole plot."""
    log = write_log(tmp_path / "run")
    lines = log.read_text().splitlines(keepends=True)
    lines[3] = lines[3][: len(lines[3]) // 2] + "\n"  # cut off mid-record
    lines.insert(6, '["no", "kind"]\n')
    lines.append('{"kind": "train_inner", "epoch": 3, "lo')  # the last append, killed
    log.write_text("".join(lines))
    before = hashlib.sha256(log.read_bytes()).hexdigest()
    out = tmp_path / "x.png"
    assert call([str(log), "--output", str(out)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert [line.split(": ")[2] for line in err] == [f"{log}:4", f"{log}:7", f"{log}:16"], err
    assert all(line.startswith("nmt-plot: warning: ") and line.endswith("; line skipped") for line in err), err
    assert "not a JSON line" in err[0] and 'a record without "kind"' in err[1] and "not a JSON line" in err[2]
    assert out.read_bytes().startswith(PNG_MAGIC)
    assert hashlib.sha256(log.read_bytes()).hexdigest() == before  # nmt-plot only reads the log
    curves = run_curves(read_log(log, warn=lambda message: None), "run")
    assert 40 not in curves.train_loss.updates and curves.train_loss.updates[-1] == 100


def test_non_finite_figures_logged_as_null_are_left_out(tmp_path):
    log = tmp_path / "train_log.jsonl"
    log.write_text('{"kind": "train_inner", "num_updates": 1, "loss": 3.0, "ppl": 8.0}\n'
                   '{"kind": "train_inner", "num_updates": 2, "loss": 1500.0, "ppl": null}\n'
                   '{"kind": "train_inner", "num_updates": 3, "loss": 2.0, "ppl": Infinity}\n')
    curves = run_curves(read_log(log), "run")
    assert curves.train_loss.updates == [1, 2, 3] and curves.train_ppl.updates == [1]


def test_bad_json_and_label_count_are_one_line_errors(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n{not json either\n")
    assert call([str(bad), "--output", str(tmp_path / "x.png")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nmt-plot: error: ")  # no warning per line when none is good
    assert "bad.jsonl:1: not a JSON line" in err[0] and "no line is a record" in err[0]
    assert not (tmp_path / "x.png").exists()
    log = write_log(tmp_path / "r")
    assert call([str(log), "--labels", "a,b", "--output", str(tmp_path / "x.png")]) == 2
    assert "--labels gives 2 label(s) for 1 log(s)" in capsys.readouterr().err


def test_without_matplotlib_one_line_tells_how_to_install(tmp_path):
    """A fresh process where importing matplotlib fails, as on an install without the extra."""
    log = write_log(tmp_path / "r")
    code = ("import sys; sys.modules['matplotlib'] = None; "
            "from nmt.cli.plot import main; main()")
    done = subprocess.run([sys.executable, "-c", code, str(log), "--output", str(tmp_path / "x.png")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip() == "nmt-plot: error: plotting needs matplotlib: pip install 'nmt[plot]'"
