"""table.md of the recipe search: every candidate's valid BLEU per setting, then the tests."""

from __future__ import annotations

from typing import Any

from studies.recipes.choice import candidates_run, earlier_tests
from studies.recipes.scoring import AVERAGES
from studies.record import Table


def markdown(table: Table) -> str:
    """table.md: every candidate of the record, in the order they were run, with every setting any of them was
    scored with (so a rerun with fewer --candidates or --lenpens writes the same table), then the tests."""
    names = candidates_run(table)
    lenpens = sorted({s.split("/lenpen ")[1] for name in names for s in table.runs[name]["valid_bleu"]}, key=float)
    settings = [f"{kind}/lenpen {p}" for kind in ("best", *AVERAGES) for p in lenpens]
    head = ("| candidate | flags | updates | " + " | ".join(f"valid BLEU {s}" for s in settings) + " |\n"
            + "|---|---|---:|" + "---:|" * len(settings) + "\n")
    rows = []
    for name in names:
        r = table.runs[name]
        cells = " | ".join(f"{r['valid_bleu'][s]:.2f}" if s in r["valid_bleu"] else "-" for s in settings)
        rows.append(f"| {name} | {r['flags'] or '(quickstart)'} | {' + '.join(map(str, r['updates']))} | {cells} |\n")
    text = head + "".join(rows)
    chosen = table.get("test")
    if chosen:
        text += f"\nChosen on valid: {tested(chosen)}\n"
    for n, earlier in enumerate(reversed(earlier_tests(table)), 1):  # the latest first
        text += f"Chosen before {'it' if n == 1 else 'that'}: {tested(earlier)}\n"
    return text


def tested(test: dict[str, Any]) -> str:
    """A test record as table.md says it: what was chosen, its valid and test BLEU."""
    return (f"{test['candidate']} ({test['setting']}, valid BLEU {test['valid_bleu']:.2f}); "
            f"test BLEU {test['test_bleu']:.2f}.")
