"""docs/terminology.md's worked example runs as shown: the example files it shows are the files of
examples/terminology, and every transcript on it (a ``$`` command and the lines after it) prints exactly those
lines, run from a folder where ``models/m30k_en_de`` is the imported fairseq Multi30k model exported as a model
folder; the server's answer holds what the page shows of it (the page abridges it)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from served_model import Server, http
from test_docs_examples import included_blocks

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "terminology.md"
MODEL = "models/m30k_en_de"


def transcripts(markdown: str) -> list[tuple[str, list[str]]]:
    """Every ``$`` command of the page's console blocks, with the lines it prints."""
    found: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", markdown, re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                found.append((line[2:], []))
            else:
                found[-1][1].append(line)
    return found


def holds(answer: Any, shown: Any) -> bool:
    """Whether ``answer`` has everything ``shown`` has: the keys shown with the values shown, lists item by item."""
    if isinstance(shown, dict):
        return isinstance(answer, dict) and all(k in answer and holds(answer[k], v) for k, v in shown.items())
    if isinstance(shown, list):
        return isinstance(answer, list) and len(answer) == len(shown) and all(map(holds, answer, shown))
    return answer == shown


def test_the_page_shows_the_example_files_verbatim():
    blocks = included_blocks(GUIDE.read_text(encoding="utf-8"))
    files = [p for p in (ROOT / "examples" / "terminology").iterdir() if p.is_file()]
    assert sorted(blocks) == sorted(p.relative_to(ROOT).as_posix() for p in files)
    for path, body in blocks.items():
        assert body == (ROOT / path).read_text(encoding="utf-8"), f"docs/terminology.md: {path} differs"


@pytest.mark.slow  # the real model: imported, exported, then translated by each interface
def test_every_transcript_prints_what_the_page_shows(tmp_path_factory, peer_export):
    model = peer_export[2]
    work = tmp_path_factory.mktemp("terminology_docs")
    (work / "models").mkdir()
    (work / MODEL).symlink_to(model)
    (work / "examples").symlink_to(ROOT / "examples")
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # nmt-interactive, python: this venv's
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": path}
    server = None
    try:
        for command, shown in transcripts(GUIDE.read_text(encoding="utf-8")):
            argv = shlex.split(command)
            if argv[0] == "nmt-serve":  # started in the background: on a free port instead of the one shown
                assert argv[-1] == "&" and argv[-3:-1] == ["--port", "5000"], command
                server = Server([str(work / a) if a.startswith(("models/", "examples/")) else a for a in argv[1:-3]])
            elif argv[0] == "curl":
                assert server is not None, "curl before nmt-serve"
                url, body = argv[-3], json.loads(argv[-1])
                status, answer, _ = http(server.base + url[url.index("/"):], body)
                assert status == 200, answer
                assert holds(answer, json.loads("\n".join(shown))), (command, answer)
            else:
                done = subprocess.run(command, shell=True, executable="/bin/bash", cwd=work, env=env,
                                      capture_output=True, text=True, timeout=300)
                assert done.stdout.splitlines() == shown, (command, done.stdout, done.stderr[-2000:])
    finally:
        if server is not None:
            assert server.stop() == 0
