"""Table 3 of "Attention Is All You Need", near convergence, on Multi30k en-de.

Trains the reference 3+3 d256 model (studies/reference.py) once per variation, one after another, for a budget
long enough that the base run's validation loss has flattened (--max-update, 3,000 by default; --patience stops a
run earlier once its validation loss stops improving). Each run is scored on its best checkpoint: dev perplexity
of that validation, test BLEU and chrF with beam 5 (nmt-generate, detokenized sacreBLEU).

Seeds: the base runs with two seeds, and their spread is the noise floor. Every variation runs with the
first seed, and with the second as well when its difference to the base (dev perplexity or BLEU) is within
the base's spread. A BLEU difference also has to pass sacreBLEU's paired bootstrap against the base (p < 0.05):
two seeds underestimate the noise, and the test set's own sampling noise is larger. The table shows each
figure's mean and spread, the paper's figure for the nearest setting, and for every Table 3 row whether the
paper's conclusion holds at this scale.

Runs are kept as they finish in RECORD_DIR/results.json, with their translations (--record-dir, by default
--out-dir; small enough for git); a rerun skips them, and a run that was interrupted resumes from its
checkpoint_last.pt, so the table can be run in pieces (e.g. --variants heads_1,heads_8).
--jobs 2 trains two runs at once, each on its share of the cores.

\b
  python -m studies.ablations data-bin/multi30k_en_de
  python -m studies.ablations data-bin/multi30k_en_de --variants base,learned_positions --max-update 1500
"""

from __future__ import annotations

import json
import re
import shlex
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Optional

import click

from nmt.cli.common import config_command
from nmt.errors import NmtError, UsageError
from nmt.fileio import atomic_write_text
from studies.ablations import translations
from studies.ablations.doc_page import with_table
from studies.ablations.job import AblationJob, generate_command, record_dir, run_dir, train_command
from studies.ablations.significance import bleu_p_values, within_noise
from studies.ablations.table import markdown, recorded
from studies.ablations.variants import VARIANTS
from studies.commands import call, chosen, precision_flags, train_to_end
from studies.record import Table


def best_validation(save_dir: Path) -> tuple[dict[str, Any], int]:
    """The validation record with the lowest loss (the one checkpoint_best.pt was saved at) and the number
    of updates the run made."""
    log = save_dir / "train_log.jsonl"
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    valid = [r for r in records if r.get("kind") == "valid"]
    if not valid:
        raise NmtError(f"{log}: no validation record; the run did not validate (was --disable-validation given?)")
    return min(valid, key=lambda r: r["loss"]), max(r["num_updates"] for r in records if "num_updates" in r)


def checkpoint_facts(path: Path) -> tuple[int, float]:
    """(parameters, training seconds) of a checkpoint; tied embeddings are counted once."""
    from nmt.checkpoint.format import load_checkpoint

    state = load_checkpoint(path)
    unique = {t.data_ptr(): t.numel() for t in state["model"].values()}
    return sum(unique.values()), float((state["training"].get("extra") or {}).get("train_time", 0.0))


def run_once(job: AblationJob, name: str, seed: int) -> dict[str, Any]:
    """Train (or resume) one variant with one seed, score its best checkpoint, keep its translations in the record,
    and return the figures."""
    save = run_dir(job, name, seed)
    click.echo(f"\n== {name}, seed {seed}: {VARIANTS[name].label}")
    tag = f"[{name}/seed{seed}] " if job.jobs > 1 else ""
    started = time.perf_counter()
    train = train_command(job, name, seed)
    train_to_end(train, tag)
    generate = generate_command(job, name, seed)
    call(generate, tag)
    summary = (save / job.gen_subset / f"generate-{job.gen_subset}.txt").read_text(encoding="utf-8")
    translations.keep(job, name, seed, translations.best_translations(summary))
    bleu, chrf = re.search(r"BLEU = ([0-9.]+)", summary), re.search(r"chrF2 = ([0-9.]+)", summary)
    best, updates = best_validation(save)
    params, train_seconds = checkpoint_facts(save / "checkpoint_last.pt")
    return {"variant": name, "seed": seed, "params": params, "dev_ppl": best["ppl"], "dev_loss_bits": best["loss"],
            "best_update": best["num_updates"], "num_updates": updates,
            "test_bleu": float(bleu.group(1)) if bleu else None, "test_chrf": float(chrf.group(1)) if chrf else None,
            "train_seconds": train_seconds, "wall_seconds": time.perf_counter() - started,
            "train_command": shlex.join(["nmt-train", *train[1:]]),
            "generate_command": shlex.join(["nmt-generate", *generate[1:]])}


def plan(job: AblationJob) -> list[str]:
    """The variants to run, the base first; a bad --doc page or --variants is refused before any training."""
    if job.doc:
        if not Path(job.doc).is_file():
            raise UsageError(f"--doc {job.doc}: no such file; give the Markdown page that shows the table")
        with_table(Path(job.doc).read_text(encoding="utf-8"), "", job.doc)
    names = chosen("--variants", job.variants, VARIANTS, job.data)
    return ["base"] + [n for n in names if n != "base"]


def wanted(job: AblationJob, table: Table, names: list[str]) -> list[tuple[str, int]]:
    """The runs (variant, seed) known to be needed so far, in order: the base's seeds, then each variation's
    first seed, followed by its other seeds once the base is complete and the first is within its spread."""
    first, base_done = job.common.seed, len(table.seeds_of("base")) >= job.seeds
    out = []
    for name in names:
        seeds = job.seeds if name == "base" else 1
        if name != "base" and base_done and table.get(f"{name}/seed{first}") and within_noise(table, name):
            seeds = job.seeds
        out += [(name, seed) for seed in range(first, first + seeds)]
    return out


def write_table(job: AblationJob, table: Table, record: Path) -> str:
    """Write RECORD/table.md from every run in the record (whatever this run's --variants), and the table's part
    of --doc; returns its text."""
    shown = recorded(table)
    text = markdown(table, shown, job.gen_subset, bleu_p_values(job, table, shown))
    atomic_write_text(record / "table.md", text)
    if job.doc:
        page = Path(job.doc)
        atomic_write_text(page, with_table(page.read_text(encoding="utf-8"), text, job.doc))
    return text


def run(job: AblationJob) -> None:
    names = plan(job)
    settings = {"data": job.data, "max_update": job.max_update, "patience": job.patience,
                "warmup_updates": job.warmup_updates, "max_tokens": job.max_tokens,
                "bf16": bool(precision_flags(job.precision)), "train_args": job.train_args,
                "gen_subset": job.gen_subset}
    record = record_dir(job)
    table = Table(record / "results.json", settings)
    seen: set[str] = set()  # runs skipped, started or finished
    running: dict[Future[dict[str, Any]], str] = {}
    failed: Optional[BaseException] = None
    with ThreadPoolExecutor(max_workers=job.jobs) as pool:
        while True:
            for name, seed in wanted(job, table, names):
                key = f"{name}/seed{seed}"
                if key in seen:
                    continue
                if table.get(key) is not None:
                    click.echo(f"== {name}, seed {seed}: already in {table.path}, skipped")
                elif failed is None and len(running) < job.jobs:
                    if seed != job.common.seed and name != "base":
                        click.echo(f"== {name} is within the base's seed spread: seed {seed} too")
                    running[pool.submit(run_once, job, name, seed)] = key
                else:
                    continue
                seen.add(key)
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                key = running.pop(future)
                if future.exception() is not None:  # the other runs finish and are kept; no new one starts
                    failed = failed or future.exception()
                    continue
                table.add(key, future.result())
                write_table(job, table, record)
    if failed is not None:
        raise failed
    text = write_table(job, table, record)
    click.echo(f"\n{text}\nwritten to {record / 'table.md'} (figures and commands in {table.path})")


main = config_command("python -m studies.ablations", AblationJob, run, help=__doc__, arguments={"data": "data"})

if __name__ == "__main__":
    main()
