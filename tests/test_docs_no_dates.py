"""The README, the user guides in docs/ and the product code (nmt/, plugins/, cli/) say what to choose and why,
without a dated log: no dates, no internal issue numbers, no CPU model names, no "this morning". Dated
measurements, with their machines, live in benchmarks/RESULTS.md; the guides link it.

Feature names a program detects (AMX, avx512_bf16) are allowed; the model names of the machines a figure was
measured on (EPYC, Xeon, ...) are not."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# generated from the code (scripts/gen_docs.py), and the reliability log, which its owner cleans separately
NOT_GUIDES = {"configuration-reference.md", "plugins.md"}
CODE_SUFFIXES = {".py", ".js", ".html", ".css", ".yaml", ".yml", ".txt", ".md"}

_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?"
          r"|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
_FULL_MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December)"
FORBIDDEN = {
    "a date": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"
                         rf"|\b{_MONTH}\.? (?:[0-3]?\d(?:st|nd|rd|th)?,? )?20\d\d\b"
                         rf"|\b[0-3]?\d(?:st|nd|rd|th)? {_MONTH}\.?(?: 20\d\d)?\b"
                         rf"|\b{_FULL_MONTH} [0-3]?\d(?:st|nd|rd|th)?\b"),
    "an internal issue number": re.compile(r"\b[Ii]ssues? #?\d+"),
    "a CPU model name": re.compile(r"\b(?:EPYC|Epyc|Xeon|Ryzen|Threadripper|Opteron|Celeron|Pentium|Athlon"
                                   r"|Core (?:i[3579]|Ultra))\b"),
    "a time of a measurement": re.compile(r"\b(?:this|that|the same|the next|one) (?:morning|afternoon|evening)\b"
                                          r"|\b(?:yesterday|last night)\b|\b(?:that|the same|the next) day\b"),
}


def offences(text: str) -> list[tuple[int, str, str]]:
    """(line number, what, the line) for every forbidden phrase in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in FORBIDDEN.items():
            if pattern.search(line):
                found.append((number, what, line.strip()))
    return found


def checked_files() -> list[Path]:
    guides = [ROOT / "README.md"] + [p for p in sorted((ROOT / "docs").rglob("*.md")) if p.name not in NOT_GUIDES]
    code = [p for top in ("nmt", "plugins", "cli") for p in sorted((ROOT / top).rglob("*"))
            if p.is_file() and p.suffix in CODE_SUFFIXES and "__pycache__" not in p.parts]
    return guides + code


def test_guides_and_code_carry_no_dates_issue_numbers_or_cpu_models():
    found = []
    for path in checked_files():
        for number, what, line in offences(path.read_text(encoding="utf-8", errors="replace")):
            found.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line[:120]}")
    assert not found, ("dated narration belongs in benchmarks/RESULTS.md (a row with date, machine, command, "
                       "figures); keep the reason here:\n" + "\n".join(found))


def test_the_patterns_catch_a_dated_log_and_let_features_pass():
    log = ("Measured 2026-11-25 on the 2-core Xeon with AMX: 9,210 wps.\n"
           "On Nov 27, 2026 the EPYC ran it in 4.2 s.\n"
           "Issue 16's goal holds.\n"
           "Later that day the machine was slower.\n"
           "A Ryzen did it on 3 December.\n")
    assert [what for _, what, _ in offences(log)] == [
        "a date", "a CPU model name", "a date", "a CPU model name", "an internal issue number",
        "a time of a measurement", "a date", "a CPU model name"]
    clean = ("bf16 where the CPU has AMX or avx512_bf16 and its products are measured faster than fp32's;\n"
             "on a 2-core CPU, 1.5x fairseq's speed (benchmarks/RESULTS.md); May the search end early? "
             "fp16 weights, 128 rows, 2^20 elements, version 2.13, issues of the server\n")
    assert offences(clean) == []
