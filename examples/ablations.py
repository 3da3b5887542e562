"""Table 3 of "Attention Is All You Need", reproduced at small scale on Multi30k en-de.

Trains the quickstart's 3+3 d256 model once per variation, one after another, each for the same
--max-update updates with the same seed and bf16, then scores it: dev perplexity and loss from
the run's last validation (train_log.jsonl), test BLEU with beam 5 (nmt-generate). Each finished
variant is appended to --results (JSON) at once, so an interrupted run keeps what it had and a
rerun skips finished variants (an unfinished training resumes from its checkpoint_last.pt). At
the end the Markdown table is printed and written to --table.

\b
  python examples/ablations.py data-bin/multi30k_en_de --max-update 400
  python examples/ablations.py data-bin/multi30k_en_de --variants base,learned_positions
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import click

from nmt.cli.common import config_command
from nmt.config.common import CommonConfig
from nmt.config.fields import opt
from nmt.errors import NmtError, UsageError
from nmt.fileio import atomic_write_text

# The quickstart's model and recipe (scripts/quickstart.sh), minus its time bound and checkpoints.
BASE_FLAGS = ["--arch", "transformer_tiny", "--encoder-layers", "3", "--decoder-layers", "3",
              "--encoder-embed-dim", "256", "--decoder-embed-dim", "256", "--encoder-ffn-embed-dim", "1024",
              "--decoder-ffn-embed-dim", "1024", "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
              "--share-all-embeddings", "--dropout", "0.3", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)",
              "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt", "--criterion", "label_smoothed_cross_entropy",
              "--label-smoothing", "0.1", "--bf16", "--no-epoch-checkpoints", "--no-progress-bar"]


def _heads(n: int) -> list[str]:
    return ["--encoder-attention-heads", str(n), "--decoder-attention-heads", str(n)]


def _restricted(window: int) -> list[str]:
    # Restricted attention is self-attention only; encoder-decoder attention stays scaled dot-product.
    return ["--attention", "restricted", "--attention-window", str(window)]  # both self-attentions; cross stays dense


# name -> (the paper's Table 3 row it mirrors, the flags that change the base model)
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "base": ("base: sinusoidal, 4 heads, dot-product, post-norm", []),
    "learned_positions": ("E: learned positional embeddings", ["--positional", "learned"]),
    "heads_1": ("A: 1 head (d_k = 256)", _heads(1)),
    "heads_8": ("A: 8 heads (d_k = 32)", _heads(8)),
    "additive": ("attention: additive (Bahdanau) scores", ["--attention", "additive"]),
    "restricted_3": ("attention: restricted self-attention, r = 3", _restricted(3)),
    "restricted_8": ("attention: restricted self-attention, r = 8", _restricted(8)),
    # Relative positions are self-attention only: encoder-decoder attention stays scaled dot-product.
    "relative": ("attention: relative-position self-attention (Shaw et al.), k = 16",
                 ["--attention", "relative", "--max-relative-position", "16"]),
    "pre_norm": ("layer norm before each sub-layer (pre-norm)", ["--encoder-normalize-before",
                                                                 "--decoder-normalize-before"]),
}


@dataclass
class AblationJob:
    """What to train, for how long, and where the figures go."""

    common: CommonConfig = field(default_factory=CommonConfig)
    data: str = opt("data-bin/multi30k_en_de", "The data-bin folder (the quickstart writes this one).", cli=False)
    variants: str = opt(",".join(VARIANTS), "Comma-separated variants to run, in this order. Known: "
                                            + ", ".join(VARIANTS) + ".")
    max_update: int = opt(400, "Updates per variant (the same for all).")
    warmup_updates: int = opt(100, "Linear warmup of the inverse_sqrt schedule, in updates.")
    max_tokens: int = opt(4096, "Tokens per batch.")
    out_dir: str = opt("runs/ablations", "Folder of one sub-folder (--save-dir) per variant.")
    results: Optional[str] = opt(None, "JSON file the finished variants are appended to [default: OUT_DIR/results.json].")
    table: Optional[str] = opt(None, "Markdown table to write [default: OUT_DIR/table.md].")
    gen_subset: str = opt("test", "Split translated for BLEU (beam 5).")
    train_args: str = opt("", "Extra nmt-train flags for every variant, one shell-quoted string "
                              "(e.g. '--num-threads 2'); they come last, so they win.")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise UsageError(f"{name}: not on PATH; install nmt first (scripts/install.sh or pip install -e .)")
    return path


def _call(argv: list[str]) -> str:
    """Run a command with its output shown live; returns its stdout + stderr for parsing."""
    click.echo("$ " + shlex.join(argv))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:  # type: ignore[union-attr]
        sys.stdout.write(line)
        lines.append(line)
    if proc.wait() != 0:
        raise NmtError(f"{Path(argv[0]).name} failed (exit {proc.returncode}); its output is above")
    return "".join(lines)


def train_command(job: AblationJob, name: str) -> list[str]:
    flags = VARIANTS[name][1]
    return [_tool("nmt-train"), job.data, *BASE_FLAGS, *flags, "--seed", str(job.common.seed),
            "--max-update", str(job.max_update), "--warmup-updates", str(job.warmup_updates),
            "--max-tokens", str(job.max_tokens), "--save-dir", str(Path(job.out_dir) / name),
            *shlex.split(job.train_args)]


def generate_command(job: AblationJob, name: str) -> list[str]:
    save = Path(job.out_dir) / name
    return [_tool("nmt-generate"), job.data, "--path", str(save / "checkpoint_last.pt"), "--beam", "5",
            "--gen-subset", job.gen_subset, "--max-len-a", "2", "--max-len-b", "10",  # as the quickstart
            "--max-tokens", str(job.max_tokens), "--bf16", "--quiet",
            "--results-path", str(save / job.gen_subset)]


def last_validation(save_dir: Path) -> dict[str, Any]:
    """The last 'valid' record of the run's train_log.jsonl (the model after --max-update updates)."""
    log = save_dir / "train_log.jsonl"
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    valid = [r for r in records if r.get("kind") == "valid"]
    if not valid:
        raise NmtError(f"{log}: no validation record; the run did not validate (was --disable-validation given?)")
    return valid[-1]


def checkpoint_facts(path: Path) -> tuple[int, float]:
    """(parameters, training seconds) of a checkpoint; tied embeddings are counted once."""
    from nmt.checkpoint.format import load_checkpoint

    state = load_checkpoint(path)
    unique = {t.data_ptr(): t.numel() for t in state["model"].values()}
    return sum(unique.values()), float((state["training"].get("extra") or {}).get("train_time", 0.0))


def run_variant(job: AblationJob, name: str) -> dict[str, Any]:
    """Train (or resume) one variant, score it, and return its row."""
    save = Path(job.out_dir) / name
    click.echo(f"\n== {name}: {VARIANTS[name][0]}")
    started = time.perf_counter()
    train = train_command(job, name)
    _call(train)
    generate = generate_command(job, name)
    _call(generate)
    summary = (save / job.gen_subset / f"generate-{job.gen_subset}.txt").read_text(encoding="utf-8")
    bleu = re.search(r"BLEU = ([0-9.]+)", summary)
    valid = last_validation(save)
    params, train_seconds = checkpoint_facts(save / "checkpoint_last.pt")
    return {"variant": name, "row": VARIANTS[name][0], "params": params, "dev_ppl": valid["ppl"],
            "dev_loss_bits": valid["loss"], "dev_nll_bits": valid["nll_loss"],
            "num_updates": valid["num_updates"], "test_bleu": float(bleu.group(1)) if bleu else None,
            "train_seconds": train_seconds, "wall_seconds": time.perf_counter() - started,
            "train_command": shlex.join(["nmt-train", *train[1:]]),
            "generate_command": shlex.join(["nmt-generate", *generate[1:]])}


def markdown_table(rows: list[dict[str, Any]], gen_subset: str) -> str:
    head = (f"| variant | Table 3 row | params | dev ppl | dev loss (bits) | {gen_subset} BLEU (beam 5) | train time |\n"
            "|---|---|---:|---:|---:|---:|---:|\n")
    body = "".join(
        f"| {r['variant']} | {r['row']} | {r['params'] / 1e6:.2f}M | {r['dev_ppl']:.2f} | {r['dev_loss_bits']:.3f} | "
        f"{'-' if r['test_bleu'] is None else format(r['test_bleu'], '.2f')} | {r['train_seconds'] / 60:.1f} min |\n"
        for r in rows)
    return head + body


def run(job: AblationJob) -> None:
    names = [v.strip() for v in job.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown or not names:
        raise UsageError(f"--variants {job.variants}: unknown {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(VARIANTS)}")
    if not Path(job.data).is_dir():
        raise UsageError(f"data-bin {job.data}: no such folder; run scripts/quickstart.sh first (it writes "
                         "data-bin/multi30k_en_de) or give the folder")
    out = Path(job.out_dir)
    results_path = Path(job.results) if job.results else out / "results.json"
    table_path = Path(job.table) if job.table else out / "table.md"
    done: dict[str, Any] = json.loads(results_path.read_text(encoding="utf-8")) if results_path.is_file() else {}
    for name in names:
        if name in done and done[name].get("num_updates") == job.max_update:
            click.echo(f"== {name}: already in {results_path}, skipped")
            continue
        done[name] = run_variant(job, name)
        atomic_write_text(results_path, json.dumps(done, indent=2) + "\n")
    table = markdown_table([done[n] for n in names], job.gen_subset)
    atomic_write_text(table_path, table)
    click.echo(f"\n{table}\nwritten to {table_path} (figures in {results_path})")


main = config_command("ablations.py", AblationJob, run, help=__doc__, arguments={"data": "data"})

if __name__ == "__main__":
    main()
