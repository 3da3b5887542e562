"""The benchmark suite's one entry point, run from the repository's root.

    python -m benchmarks list                                  each benchmark, what it compares, the data it needs
    python -m benchmarks run NAME [ARGS...] [--record] [--results FILE]
                                                               run one; NAME --help for its arguments

``--record`` appends the run's figures to benchmarks/RESULTS.md (or ``--results FILE``) as a row of the section
``## NAME`` (made at the end of the file when missing): ``| date | machine | commit | command | figures |``.
"""

from __future__ import annotations

import datetime
import importlib
import platform
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

from benchmarks import BENCHMARKS, HELPERS, ROOT, benchmark
from nmt.errors import NmtError, UsageError
from nmt.fileio import atomic_write_text

RESULTS = ROOT / "benchmarks" / "RESULTS.md"
TABLE_HEAD = "| date | machine | commit | command | figures |\n|---|---|---|---|---|\n"


def listing() -> str:
    """What ``list`` prints: every benchmark (name, what it compares, what it needs), then the helpers."""
    wrap = textwrap.TextWrapper(width=116, initial_indent="    ", subsequent_indent="              ",
                                break_on_hyphens=False)
    lines = ["Benchmarks: python -m benchmarks run NAME [ARGS...] [--record]; NAME --help for its arguments.", ""]
    for entry in BENCHMARKS:
        lines.append(entry.name)
        lines.extend(wrap.wrap(f"compares: {entry.compares}"))
        lines.extend(wrap.wrap(f"needs:    {entry.needs}"))
    lines += ["", "Helpers of the benchmarks (not run on their own):"]
    for name, what in HELPERS.items():
        lines += [name, *wrap.wrap(what)]
    return "\n".join(lines)


def machine() -> str:
    """A short description of this machine: cores, CPU model, bf16 instructions, torch version."""
    import torch

    from nmt.hardware import usable_cores

    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1]
                break
    except OSError:
        pass
    model = re.sub(r"\((R|TM|tm)\)|\bCPU\b|\bProcessor\b|@.*|\d+-Core", "", model)
    cpu = torch.cpu
    flags = [flag for flag, check in (("AMX", "_is_amx_tile_supported"), ("avx512_bf16", "_is_avx512_bf16_supported"))
             if getattr(cpu, check, lambda: False)()]
    return (f"{usable_cores()}-core {' '.join(model.split())}, {', '.join(flags) or 'no bf16 instructions'}, "
            f"torch {torch.__version__}")


def commit() -> str:
    """HEAD's short hash, with "+dirty" when the working tree has changes git sees; "-" outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        status = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return "-"
    if head.returncode:
        return "-"
    return head.stdout.strip() + ("+dirty" if status.stdout.strip() else "")


def cell(text: str) -> str:
    """``text`` as one Markdown table cell: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def with_row(document: str, name: str, row: str) -> str:
    """``document`` with ``row`` appended to the table of its section ``## name``: after the section's last table
    row, or as a new table at the section's end; the section is made at the end of the document when missing."""
    lines = document.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == f"## {name}"), None)
    if start is None:
        body = document.rstrip("\n")
        return (body + "\n\n" if body else "") + f"## {name}\n\n{TABLE_HEAD}{row}\n"
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    last = next((i for i in range(end - 1, start, -1) if lines[i].startswith("|")), None)
    if last is not None:
        lines.insert(last + 1, row + "\n")
    else:
        while end > start + 1 and not lines[end - 1].strip():
            end -= 1
        lines[end:end] = ["\n", TABLE_HEAD, row + "\n"] + (["\n"] if end < len(lines) else [])
    return "".join(lines)


def record(results: Path, name: str, argv: list[str], figures: str) -> None:
    command = shlex.join(["python", "-m", "benchmarks", "run", name, *argv])
    row = (f"| {datetime.date.today().isoformat()} | {cell(machine())} | {commit()} | `{cell(command)}` "
           f"| {cell(figures)} |")
    document = results.read_text(encoding="utf-8") if results.is_file() else ""
    atomic_write_text(results, with_row(document, name, row))
    print(f"recorded in {results}, section ## {name}")


def run(argv: list[str]) -> int:
    """``run NAME [ARGS...]``: the runner's own options (--record, --results FILE) may stand anywhere after ``run``;
    no benchmark takes options of those names."""
    rest, results, to_record = [], RESULTS, False
    words = iter(argv)
    for word in words:
        if word == "--record":
            to_record = True
        elif word == "--results" or word.startswith("--results="):
            value = word.partition("=")[2] or next(words, None)
            if not value:
                raise UsageError("--results needs a file (the record to append to)")
            results = Path(value)
        else:
            rest.append(word)
    if not rest:
        raise UsageError("run needs a benchmark's name; `python -m benchmarks list` names them")
    name, args = rest[0], rest[1:]
    entry = benchmark(name)
    module = importlib.import_module(f"benchmarks.{entry.name}")
    try:
        figures = module.main(args)
    except NmtError as error:  # a missing input, a failed command: one line, named after the benchmark
        print(f"{name}: {error}", file=sys.stderr)
        return error.exit_code
    except SystemExit as done:  # argparse: --help (0) or a bad option (2, its message already printed)
        return done.code if isinstance(done.code, int) else 1
    print(f"{name}: {figures}")
    if to_record:
        record(results, name, args, figures)
    return 0


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["list"] and len(argv) == 1:
            print(listing())
            return 0
        if argv[:1] == ["run"]:
            return run(argv[1:])
        if argv[:1] in (["-h"], ["--help"]):
            print(__doc__.strip())
            return 0
        raise UsageError("give `list` or `run NAME [ARGS...]` (python -m benchmarks --help)")
    except NmtError as error:
        print(f"benchmarks: {error}", file=sys.stderr)
        return error.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
