"""Shared by the nmt-preprocess tests: run the real command in-process or in a subprocess,
write toy corpora, and snapshot a folder to prove it was left untouched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nmt.cli.preprocess import main as preprocess_main

EN = ["a cat sat on the mat", "the dog ran", "", "a bird sang on a tree", "the cat and the dog"]
DE = ["eine katze sass auf der matte", "der hund lief", "", "ein vogel sang auf einem baum",
      "die katze und der hund"]


def write_corpus(folder: Path, split: str, src_lines: list[str], tgt_lines: list[str],
                 langs: tuple[str, str] = ("en", "de")) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    for lang, lines in zip(langs, (src_lines, tgt_lines)):
        (folder / f"{split}.{lang}").write_text("".join(ln + "\n" for ln in lines), encoding="utf-8")
    return str(folder / split)


def run_preprocess(argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``nmt-preprocess argv`` run in this process."""
    try:
        preprocess_main([str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    out = capsys.readouterr()
    return code, out.out, out.err


def run_subprocess(args: list[str], env_extra: dict[str, str] | None = None, cwd: Path | None = None,
                   timeout: float = 300):
    """``python -m args...`` in a fresh process (a generous timeout: the machine may be busy)."""
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (and the names beside it) with its content."""
    files = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    files["<siblings>"] = "\n".join(sorted(p.name for p in folder.parent.iterdir())).encode()
    return files


def base_args(src_pref: str, dest: Path, *extra: str) -> list[str]:
    return ["--source-lang", "en", "--target-lang", "de", "--trainpref", src_pref, "--destdir", str(dest), *extra]
