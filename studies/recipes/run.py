"""The best Multi30k en-de recipe for a training-time budget, chosen on the validation set only.

Every candidate is the reference recipe (studies/reference.py, warmup 500, --max-tokens 4096; the candidate
`quickstart` is it unchanged) with a few flags changed (studies/recipes/candidates.py). Each trains for --minutes of
training time (nmt-train --stop-time-hours), saving a checkpoint every 50 updates (the last 20 kept), and is scored
on the valid split with beam 5: checkpoint_best.pt, the average of the last 5 interval checkpoints (250 updates) and
that of the last 20 (1,000 updates), each with every --lenpens length penalty. The `ensemble` candidate trains two
models for half the time each (seeds 1 and 2) and decodes them together, against one model trained for the whole
time (`ensemble_tokens_1024` the same with 1,024-token batches); `ensemble_side_by_side` trains the two at the same
time, each for the whole time on half the cores (the same budget of cores x time: a small model uses two cores
poorly, so each gets more than half the updates of a model trained alone). With --test, the best (candidate,
checkpoint, length penalty) on valid is translated on the test split once; a candidate that wins on valid later has
its own test translated, the earlier one kept beside it in the record.

Runs are kept in results.json as they finish, with table.md beside it, in --record-dir (default OUT_DIR; a
folder in git outlives the machine the checkpoints are on); a rerun skips them (scoring their checkpoints with
any length penalty of --lenpens they lack, while the checkpoints are still there) and an interrupted training
resumes from its checkpoint_last.pt.

\b
  python -m studies.recipes data-bin/multi30k_en_de --minutes 30
  python -m studies.recipes data-bin/multi30k_en_de --minutes 30 --candidates quickstart,lr_2e-3 --test
"""

from __future__ import annotations

import shlex
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import click

from nmt.cli.common import config_command
from nmt.fileio import atomic_write_text
from studies.commands import chosen, precision_flags, thread_flags, tool, train_to_end
from studies.recipes.candidates import CANDIDATES, ENSEMBLES
from studies.recipes.choice import translate_test
from studies.recipes.job import RecipeJob
from studies.recipes.scoring import KEEP, averages, score_valid
from studies.recipes.table import markdown
from studies.record import Table
from studies.reference import BASE_FLAGS


def train(job: RecipeJob, name: str, seed: int, minutes: float, save: Path, share: int) -> list[str]:
    """Train one model of candidate ``name`` into ``save``, on 1/``share`` of the cores; returns the command."""
    argv = [tool("nmt-train"), job.data, *BASE_FLAGS, "--warmup-updates", "500", "--max-tokens", "4096",
            *CANDIDATES[name], *precision_flags(job.precision), "--seed", str(seed),
            "--stop-time-hours", f"{minutes / 60:.6g}", "--save-interval-updates", "50",
            "--keep-interval-updates", str(KEEP), "--save-dir", str(save), *thread_flags("--num-threads", share),
            *shlex.split(job.train_args)]
    train_to_end(argv, f"[seed{seed}] " if share > 1 else "")
    return argv


def _updates(save: Path) -> int:
    from nmt.checkpoint.format import load_checkpoint

    return int(load_checkpoint(save / "checkpoint_last.pt")["training"]["num_updates"])


def run_candidate(job: RecipeJob, name: str, lenpens: list[str]) -> dict[str, Any]:
    """Train candidate ``name`` and score its checkpoints on valid with each length penalty; returns its record
    (with the checkpoints each setting decoded, for --test)."""
    out = Path(job.out_dir) / name
    part, together = ENSEMBLES.get(name, (1.0, False))
    models = [(seed, job.minutes * part) for seed in ((1, 2) if name in ENSEMBLES else (1,))]
    share = len(models) if together else 1
    with ThreadPoolExecutor(max_workers=share) as pool:  # one worker: one model after the other
        argvs = list(pool.map(lambda m: train(job, name, m[0], m[1], out / f"seed{m[0]}", share), models))
    commands = [shlex.join(["nmt-train", *argv[1:]]) for argv in argvs]
    checkpoints: dict[str, list[Path]] = {}
    for seed, _ in models:
        save = out / f"seed{seed}"
        checkpoints.setdefault("best", []).append(save / "checkpoint_best.pt")
        for kind, averaged in averages(save).items():
            checkpoints.setdefault(kind, []).append(averaged)
    scored = {kind: paths for kind, paths in checkpoints.items() if len(paths) == len(models)}
    updates = [_updates(out / f"seed{seed}") for seed, _ in models]
    record = {"variant": name, "seed": 1, "flags": " ".join(CANDIDATES[name]), "updates": updates,
              "valid_bleu": {}, "checkpoints": {kind: [str(p) for p in paths] for kind, paths in scored.items()},
              "train_commands": commands}
    score_valid(job, record, lenpens)
    return record


def run(job: RecipeJob) -> None:
    names = chosen("--candidates", job.candidates, CANDIDATES, job.data)
    lenpens = [p.strip() for p in job.lenpens.split(",") if p.strip()]
    record_dir = Path(job.record_dir or job.out_dir)
    settings = {"data": job.data, "minutes": job.minutes, "bf16": bool(precision_flags(job.precision)),
                "train_args": job.train_args}
    table = Table(record_dir / "results.json", settings)
    for name in names:
        record = table.get(name)
        if record is None:
            table.add(name, run_candidate(job, name, lenpens))
        elif score_valid(job, record, lenpens):
            table.add(name, record)
        else:
            click.echo(f"== {name}: already in {table.path}, skipped")
    if job.test:
        translate_test(job, table)
    text = markdown(table)
    atomic_write_text(record_dir / "table.md", text)
    click.echo(f"\n{text}\nwritten to {record_dir / 'table.md'} (figures and commands in {table.path})")


main = config_command("python -m studies.recipes", RecipeJob, run, help=__doc__, arguments={"data": "data"})

if __name__ == "__main__":
    main()
