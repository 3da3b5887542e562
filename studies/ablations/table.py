"""table.md: every measured variant with its figures, its comparison with the base and the paper's figure for the
nearest setting, then a line per Table 3 row on whether the paper's conclusion holds at this scale."""

from __future__ import annotations

import re
from typing import Any, Optional

from studies.ablations.claims import CLAIMS
from studies.ablations.significance import SIGNIFICANCE, compare, figures
from studies.ablations.variants import VARIANTS
from studies.record import Table


def _minutes(record: dict[str, Any]) -> str:
    return "-" if record.get("train_seconds") is None else f"{record['train_seconds'] / 60:.0f} min"


def _threads(record: dict[str, Any]) -> str:
    found = re.search(r"--num-threads (\d+)", record.get("train_command", ""))
    return f"{found.group(1)} thr" if found else "all cores"


def recorded(table: Table) -> list[str]:
    """The variants the record has runs of, in VARIANTS' order: table.md shows them all, whatever this run's
    --variants."""
    return [name for name in VARIANTS if table.seeds_of(name)]


def markdown(table: Table, names: list[str], gen_subset: str, bleu_p: Optional[dict[str, float]] = None) -> str:
    """The table of every measured variant of ``names`` and a line per Table 3 row on the paper's conclusion
    (``bleu_p``: each variation's paired-bootstrap p-value against the base, where its hypotheses were kept)."""
    bleu_p = bleu_p or {}
    head = (f"| row | variant | setting | params | seeds | dev ppl | {gen_subset} BLEU | chrF | vs base (ppl, BLEU) | "
            "BLEU p | paper (ppl / BLEU) | best at / run | train time (seed 1) |\n"
            "|---|---|---|---:|---:|---:|---:|---:|---|---:|---|---:|---:|\n")
    lines, verdicts = [], {}
    for name in names:
        runs = table.seeds_of(name)
        if not runs:
            continue
        variant, first = VARIANTS[name], runs[0]
        ppl, bleu, chrf = (figures(table, name, m) for m in ("dev_ppl", "test_bleu", "test_chrf"))
        cells = " | ".join("-" if f is None else f.cell(d) for f, d in ((ppl, 2), (bleu, 2), (chrf, 1)))
        versus, p_cell = "", ""
        if name != "base":
            verdicts[name] = compare(table, name, bleu_p.get(name))
            versus = ", ".join(verdicts[name].values())
            p_cell = f"{bleu_p[name]:.3f}" if name in bleu_p else "-"
        lines.append(f"| {variant.row} | {name} | {variant.label} | {first['params'] / 1e6:.2f}M | {len(runs)} | "
                     f"{cells} | {versus} | {p_cell} | {variant.paper.cell()} | "
                     f"{first['best_update']} / {first['num_updates']} | "
                     f"{_minutes(first)} ({_threads(first)}) |\n")
    claims = [f"- **{c.row}**: {c.text}: {c.judge(verdicts)}.\n" for c in CLAIMS]
    intro = (f"\nThe paper's conclusions, checked against the base's seed spread (and, for BLEU, a paired bootstrap "
             f"at p < {SIGNIFICANCE}):\n\n")
    notes = [f"- {key}: {r['note']}\n" for key, r in table.runs.items() if r.get("variant") in names and r.get("note")]
    noted = "\nRuns with a note:\n\n" + "".join(notes) if notes else ""
    return head + "".join(lines) + intro + "".join(claims) + noted
