"""Scoring a candidate on a split: beam-5 BLEU of its best checkpoint and of the averages of its last interval
checkpoints, with each length penalty."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from nmt.errors import NmtError
from studies.commands import call, precision_flags, tool
from studies.recipes.job import RecipeJob

# the averages scored, narrowest first: name -> how many of the last interval checkpoints (every 50 updates) it spans
AVERAGES: dict[str, int] = {"average": 5, "wide_average": 20}
KEEP = max(AVERAGES.values())  # interval checkpoints kept


def averages(save: Path) -> dict[str, Path]:
    """Each AVERAGES kind over the last interval checkpoints (all of them when fewer), by kind; a kind is left
    out when it would average fewer than two checkpoints or the same ones as a narrower kind."""
    found = len(list(save.glob("checkpoint_*_*.pt")))
    made: dict[str, Path] = {}
    narrower = 1  # checkpoints the previous kind averaged
    for kind, span in AVERAGES.items():
        count = min(found, span)
        if count > narrower:
            made[kind] = save / f"checkpoint_{kind}.pt"
            call([tool("nmt-average-checkpoints"), "--inputs", str(save), "--num-update-checkpoints", str(count),
                  "--output", str(made[kind])])
        narrower = count
    return made


def bleu(job: RecipeJob, paths: list[Path], subset: str, lenpen: str, results: Path) -> float:
    """Beam-5 BLEU of ``paths`` (an ensemble when more than one) on ``subset``, detokenized sacreBLEU."""
    call([tool("nmt-generate"), job.data, "--path", ":".join(map(str, paths)), "--beam", "5", "--lenpen", lenpen,
          "--gen-subset", subset, "--max-len-a", "2", "--max-len-b", "10", "--max-tokens", "4096",
          *precision_flags(job.precision), "--quiet", "--results-path", str(results)])
    found = re.search(r"BLEU = ([0-9.]+)", (results / f"generate-{subset}.txt").read_text(encoding="utf-8"))
    if found is None:
        raise NmtError(f"{results}/generate-{subset}.txt: no BLEU line (does the data-bin keep the raw references?)")
    return float(found.group(1))


def score_valid(job: RecipeJob, record: dict[str, Any], lenpens: list[str]) -> bool:
    """Score a candidate's checkpoints on valid with every length penalty it has no score for yet (a rerun with
    more --lenpens scores the finished candidates without training them again); True if any was added."""
    out = Path(job.out_dir) / record["variant"]
    added = False
    for kind, paths in record["checkpoints"].items():
        for lenpen in lenpens:
            setting = f"{kind}/lenpen {lenpen}"
            if setting in record["valid_bleu"]:
                continue
            if not all(Path(p).is_file() for p in paths):  # the record outlived its --out-dir
                click.echo(f"== {record['variant']}: its {kind} checkpoints are gone ({paths[0]}); not scored with "
                           f"lenpen {lenpen}")
            else:
                record["valid_bleu"][setting] = bleu(job, [Path(p) for p in paths], "valid", lenpen,
                                                     out / f"valid-{kind}-{lenpen}")
                added = True
    return added
