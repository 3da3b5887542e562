"""nmt-interactive through the real console script: raw lines on stdin, detokenized lines out."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from nmt.cli.generate import main as generate_main
from test_generate_setup import call_cli, make_checkpoint, make_data_bin


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("interactive")
    data_bin = make_data_bin(folder, n_test=5)
    return folder, data_bin, make_checkpoint(data_bin, folder / "a.pt", seed=3)


def interactive(*argv, stdin: str) -> subprocess.CompletedProcess:
    """The installed console script (the module's main() when it is not on PATH)."""
    script = shutil.which("nmt-interactive")
    command = [script] if script else [sys.executable, "-c", "from nmt.cli.interactive import main; main()"]
    return subprocess.run([*command, *map(str, argv)], input=stdin, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_stdin_lines_are_translated_like_the_binarized_split(setup, capsys):
    """The raw test sentences piped through nmt-interactive (its own tokenizer + BPE) come out,
    in order, as the D- lines nmt-generate gives for the binarized test split."""
    folder, data_bin, ckpt = setup
    raw = (folder / "test.en").read_text(encoding="utf-8")
    options = ["--path", ckpt, "--beam", "3", "--max-len-b", "6"]
    done = interactive(data_bin, *options, "--buffer-size", "2", stdin=raw)
    assert done.returncode == 0, done.stderr
    translations = done.stdout.splitlines()
    assert len(translations) == len(raw.splitlines())
    assert "sentences/s" in done.stderr

    assert call_cli(generate_main, [data_bin, *options]) == 0
    out = capsys.readouterr().out
    detok = {int(m.group(1)): m.group(2) for m in re.finditer(r"^D-(\d+)\t[^\t]*\t(.*)$", out, re.M)}
    assert translations == [detok[i] for i in range(len(translations))]


def test_input_file_and_verbose_lines(setup, tmp_path):
    folder, data_bin, ckpt = setup
    src = tmp_path / "in.txt"
    src.write_text("the cat sat on the mat.\na big red house!\n", encoding="utf-8")
    done = interactive(data_bin, "--path", ckpt, "--beam", "2", "--nbest", "2", "--max-len-b", "4",
                       "--input", src, "--verbose", stdin="")
    assert done.returncode == 0, done.stderr
    kinds = [line.split("-", 1)[0] for line in done.stdout.splitlines()]
    assert kinds == ["S", "H", "D", "P", "H", "D", "P"] * 2
    assert done.stdout.splitlines()[0] == "S-0\tthe cat sat on the mat."


def test_missing_input_file_is_one_line(setup, tmp_path, capsys):
    from nmt.cli.interactive import main

    folder, data_bin, ckpt = setup
    code = call_cli(main, [data_bin, "--path", ckpt, "--input", tmp_path / "nope.txt"])
    err = capsys.readouterr().err
    assert code == 1 and "nope.txt" in err and "Traceback" not in err
