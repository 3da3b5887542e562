"""Table 3 of "Attention Is All You Need", near convergence, on Multi30k en-de.

Trains the quickstart's 3+3 d256 model once per variation, one after another, for a budget long enough
that the base run's validation loss has flattened (--max-update, 3,000 by default; --patience stops a run
earlier once its validation loss stops improving). Each run is scored on its best checkpoint: dev
perplexity of that validation, test BLEU and chrF with beam 5 (nmt-generate, detokenized sacreBLEU).

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
  python examples/ablations.py data-bin/multi30k_en_de
  python examples/ablations.py data-bin/multi30k_en_de --variants base,learned_positions --max-update 1500
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any, Iterator, Optional

import click

from nmt.cli.common import config_command
from nmt.config.common import CommonConfig
from nmt.config.fields import opt
from nmt.errors import NmtError, UsageError
from nmt.fileio import atomic_write_text
from nmt.hardware import bf16_is_faster, cores_per_process
from nmt.training.preemption import STOP_LINE_START

# The quickstart's model and recipe (scripts/quickstart.sh) as it was when the study began, minus its time bound and
# interval checkpoints: the quickstart has since (2026-11-26) taken 1,024-token batches, pre-norm, lr 2e-3 and dropout
# 0.2; the study keeps post-norm, lr 1e-3, dropout 0.3 and AblationJob.max_tokens (4,096), so that its rows stay
# comparable.
BASE_FLAGS = ["--arch", "transformer_tiny", "--encoder-layers", "3", "--decoder-layers", "3",
              "--encoder-embed-dim", "256", "--decoder-embed-dim", "256", "--encoder-ffn-embed-dim", "1024",
              "--decoder-ffn-embed-dim", "1024", "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
              "--share-all-embeddings", "--dropout", "0.3", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)",
              "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt", "--criterion", "label_smoothed_cross_entropy",
              "--label-smoothing", "0.1", "--no-epoch-checkpoints", "--no-progress-bar"]


@dataclass(frozen=True)
class Paper:
    """The paper's Table 3 figures (dev newstest2013 EN-DE, 100k updates) for the nearest setting."""

    setting: str
    ppl: Optional[float] = None  # None: the paper gives no figure (a claim in the text, or not in the paper)
    bleu: Optional[float] = None

    def cell(self) -> str:
        figures = "" if self.ppl is None else f": {self.ppl:.2f} / {self.bleu:.1f}"
        return self.setting + figures


@dataclass(frozen=True)
class Variant:
    row: str  # the Table 3 row it belongs to (A-E), or the section of the text for rows the table lacks
    label: str
    flags: tuple[str, ...]
    paper: Paper


def _both(flag: str, value: object) -> tuple[str, ...]:
    return f"--encoder-{flag}", str(value), f"--decoder-{flag}", str(value)


def _restricted(window: int) -> tuple[str, ...]:
    # restricted attention is self-attention only: encoder-decoder attention stays scaled dot-product
    return "--attention", "restricted", "--attention-window", str(window)


# the lines of a --doc page between which the table goes
DOC_BEGIN, DOC_END = "<!-- ablations table: written by examples/ablations.py --doc -->", "<!-- /ablations table -->"

VARIANTS: dict[str, Variant] = {
    "base": Variant("base", "sinusoidal, 4 heads (d_k 64), dot-product, post-norm, P_drop 0.3, eps_ls 0.1", (),
                    Paper("base (N 6, d_model 512, 8 heads)", 4.92, 25.8)),
    "heads_1": Variant("A", "1 head (d_k 256)", _both("attention-heads", 1), Paper("1 head (d_k 512)", 5.29, 24.9)),
    "heads_8": Variant("A", "8 heads (d_k 32)", _both("attention-heads", 8), Paper("16 heads (d_k 32)", 4.91, 25.8)),
    "heads_16": Variant("A", "16 heads (d_k 16)", _both("attention-heads", 16),
                        Paper("32 heads (d_k 16)", 5.01, 25.4)),
    "key_dim_16": Variant("B", "d_k 16 (d_v 64)", ("--attention-key-dim", "16"), Paper("d_k 16", 5.16, 25.1)),
    "key_dim_32": Variant("B", "d_k 32 (d_v 64)", ("--attention-key-dim", "32"), Paper("d_k 32", 5.01, 25.4)),
    "layers_1": Variant("C", "N 1 (a third of the base)", _both("layers", 1), Paper("N 2", 6.11, 23.7)),
    "layers_6": Variant("C", "N 6", _both("layers", 6), Paper("N 8", 4.88, 25.5)),
    "d_model_128": Variant("C", "d_model 128 (d_k 32)", _both("embed-dim", 128),
                           Paper("d_model 256 (d_k 32)", 5.75, 24.5)),
    "d_model_512": Variant("C", "d_model 512 (d_k 128)", _both("embed-dim", 512),
                           Paper("d_model 1024 (d_k 128)", 4.66, 26.0)),
    "ffn_512": Variant("C", "d_ff 512", _both("ffn-embed-dim", 512), Paper("d_ff 1024", 5.12, 25.4)),
    "ffn_2048": Variant("C", "d_ff 2048", _both("ffn-embed-dim", 2048), Paper("d_ff 4096", 4.75, 26.2)),
    "dropout_0": Variant("D", "P_drop 0.0", ("--dropout", "0.0"), Paper("P_drop 0.0", 5.77, 24.6)),
    "dropout_0.1": Variant("D", "P_drop 0.1", ("--dropout", "0.1"), Paper("P_drop 0.2 (base 0.1)", 4.95, 25.5)),
    "ls_0": Variant("D", "eps_ls 0.0", ("--label-smoothing", "0.0"), Paper("eps_ls 0.0", 4.67, 25.3)),
    "ls_0.2": Variant("D", "eps_ls 0.2", ("--label-smoothing", "0.2"), Paper("eps_ls 0.2", 5.47, 25.7)),
    "learned_positions": Variant("E", "learned positional embeddings", ("--positional", "learned"),
                                 Paper("positional embedding", 4.92, 25.7)),
    "additive": Variant("attention", "additive (Bahdanau) scores", ("--attention", "additive"),
                        Paper("section 3.2.1, no figure")),
    "restricted_3": Variant("attention", "restricted self-attention, r 3", _restricted(3),
                            Paper("section 4, no figure")),
    "restricted_8": Variant("attention", "restricted self-attention, r 8", _restricted(8),
                            Paper("section 4, no figure")),
    # Shaw et al. 2018 replace the absolute positions by relative ones (keeping both gained nothing there)
    "relative": Variant("attention", "relative-position self-attention, k 16, no absolute positions",
                        ("--attention", "relative", "--max-relative-position", "16", "--positional", "none"),
                        Paper("Shaw et al. 2018, no Table 3 figure")),
    "pre_norm": Variant("norm", "pre-norm (layer norm before each sub-layer)",
                        ("--encoder-normalize-before", "--decoder-normalize-before"), Paper("not in the paper")),
}


@dataclass
class AblationJob:
    """What to train, for how long, and where the figures go."""

    common: CommonConfig = field(default_factory=CommonConfig)
    data: str = opt("data-bin/multi30k_en_de", "The data-bin folder (the quickstart writes this one).", cli=False)
    variants: str = opt(",".join(VARIANTS), "Comma-separated variants to run, in this order (the base always runs "
                                            "first: the others are compared with it). Known: " + ", ".join(VARIANTS)
                        + ".")
    max_update: int = opt(3000, "Updates per run at most (the same for all).", low=1)
    patience: int = opt(-1, "Stop a run once its validation loss has not improved for N validations (-1: run all "
                            "--max-update updates).", low=-1)
    warmup_updates: int = opt(500, "Linear warmup of the inverse_sqrt schedule, in updates.", low=0)
    max_tokens: int = opt(4096, "Tokens per batch.", low=1)
    seeds: int = opt(2, "Seeds for the base, and for every variation within the base's seed spread.", low=1)
    precision: str = opt("auto", "Training and decoding precision: auto is bf16 where this machine's bf16 products "
                                 "are measured faster than fp32's (nmt.hardware.bf16_is_faster), else fp32.",
                         choices=["auto", "fp32", "bf16"])
    out_dir: str = opt("runs/ablations", "Folder of one sub-folder (--save-dir) per run.")
    record_dir: str = opt("", "Folder of the study's record: results.json, table.md and translations/ (each run's "
                              "best translation of every test sentence, for the paired bootstrap). It is small "
                              "enough to keep in git, so a study outlives the machine its checkpoints are on. "
                              "Empty: --out-dir.")
    doc: str = opt("", "A Markdown page that shows the table itself (docs/ablations.md): its lines between "
                       f"'{DOC_BEGIN}' and '{DOC_END}' are rewritten with table.md's text whenever table.md is.")
    gen_subset: str = opt("test", "Split translated for BLEU (beam 5).")
    jobs: int = opt(1, "Runs trained at the same time, sharing the cores (each gets cores / N threads). On a "
                       "2-core CPU two 1-thread runs made 1.2-1.4x the updates per hour of one 2-thread run on an "
                       "EPYC and an AMX Xeon, and 1.0x in bf16 on a Xeon without AMX; the figures do not depend on "
                       "it, so it is not a setting of the table.", low=1)
    train_args: str = opt("", "Extra nmt-train flags for every run, one shell-quoted string (e.g. '--num-threads "
                              "2'); they come last, so they win.")


@dataclass(frozen=True)
class Figures:
    """The mean and spread (max - min) of one metric over a variant's seeds."""

    mean: float
    spread: float
    seeds: int

    @classmethod
    def of(cls, values: list[float]) -> Figures:
        return cls(mean(values), max(values) - min(values), len(values))

    def cell(self, digits: int) -> str:
        return f"{self.mean:.{digits}f}" + (f" ± {self.spread / 2:.{digits}f}" if self.seeds > 1 else "")


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise UsageError(f"{name}: not on PATH; install nmt first (scripts/install.sh or pip install -e .)")
    return path


def call(argv: list[str], tag: str = "") -> str:
    """Run a command with its output shown live, each line after ``tag`` (which run it is, when several run at
    once); returns its stdout + stderr for parsing."""
    click.echo(f"{tag}$ " + shlex.join(argv))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:  # type: ignore[union-attr]
        sys.stdout.write(tag + line)
        lines.append(line)
    if proc.wait() != 0:
        raise NmtError(f"{Path(argv[0]).name} failed (exit {proc.returncode}); its output is above")
    return "".join(lines)


STOPPED = re.compile(f"^{re.escape(STOP_LINE_START)}.*$", re.MULTILINE)  # a preempted nmt-train's last line


def train_to_end(argv: list[str], tag: str = "") -> None:
    """Run an nmt-train command to its end. A training stopped by a signal saves checkpoint_last.pt and exits 0
    (preemption); here that is an error, so that a half-trained model is never scored as a finished run: running
    the study again resumes it."""
    stopped = STOPPED.search(call(argv, tag))
    if stopped is not None:
        raise NmtError(f"{stopped.group(0)} (not scored: a run stopped before its end is not a finished one)")


def precision_flags(precision: str) -> list[str]:
    """The nmt-train / nmt-generate flags of --precision (auto: bf16 where it is measured faster than fp32)."""
    return ["--bf16"] if precision == "bf16" or (precision == "auto" and bf16_is_faster()) else []


def thread_flags(option: str, share: int) -> list[str]:
    """``option`` (nmt-train's --num-threads, nmt-generate's --threads) giving one of ``share`` processes that run
    at once its part of the cores; nothing for a process alone (the tools' own default uses them all)."""
    return [] if share == 1 else [option, str(cores_per_process(share))]


def run_dir(job: AblationJob, name: str, seed: int) -> Path:
    return Path(job.out_dir) / name / f"seed{seed}"


def record_dir(job: AblationJob) -> Path:
    return Path(job.record_dir or job.out_dir)


def translations_path(job: AblationJob, name: str, seed: int) -> Path:
    return record_dir(job) / "translations" / f"{name}.seed{seed}.{job.gen_subset}.txt"


def train_command(job: AblationJob, name: str, seed: int) -> list[str]:
    return [tool("nmt-train"), job.data, *BASE_FLAGS, *VARIANTS[name].flags, *precision_flags(job.precision),
            "--seed", str(seed), "--max-update", str(job.max_update), "--patience", str(job.patience),
            "--warmup-updates", str(job.warmup_updates), "--max-tokens", str(job.max_tokens),
            "--save-dir", str(run_dir(job, name, seed)), *thread_flags("--num-threads", job.jobs),
            *shlex.split(job.train_args)]


def generate_command(job: AblationJob, name: str, seed: int) -> list[str]:
    save = run_dir(job, name, seed)
    return [tool("nmt-generate"), job.data, "--path", str(save / "checkpoint_best.pt"), "--beam", "5",
            "--gen-subset", job.gen_subset, "--max-len-a", "2", "--max-len-b", "10",  # as the quickstart
            "--max-tokens", str(job.max_tokens), *precision_flags(job.precision), *thread_flags("--threads", job.jobs),
            "--results-path", str(save / job.gen_subset)]  # not --quiet: the hypotheses are kept for the bootstrap


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
    """Train (or resume) one variant with one seed, score its best checkpoint, and return the figures."""
    save = run_dir(job, name, seed)
    click.echo(f"\n== {name}, seed {seed}: {VARIANTS[name].label}")
    tag = f"[{name}/seed{seed}] " if job.jobs > 1 else ""
    started = time.perf_counter()
    train = train_command(job, name, seed)
    train_to_end(train, tag)
    generate = generate_command(job, name, seed)
    call(generate, tag)
    summary = (save / job.gen_subset / f"generate-{job.gen_subset}.txt").read_text(encoding="utf-8")
    kept = translations_path(job, name, seed)
    kept.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(kept, "".join(f"{line}\n" for line in best_translations(summary)))
    bleu, chrf = re.search(r"BLEU = ([0-9.]+)", summary), re.search(r"chrF2 = ([0-9.]+)", summary)
    best, updates = best_validation(save)
    params, train_seconds = checkpoint_facts(save / "checkpoint_last.pt")
    return {"variant": name, "seed": seed, "params": params, "dev_ppl": best["ppl"], "dev_loss_bits": best["loss"],
            "best_update": best["num_updates"], "num_updates": updates,
            "test_bleu": float(bleu.group(1)) if bleu else None, "test_chrf": float(chrf.group(1)) if chrf else None,
            "train_seconds": train_seconds, "wall_seconds": time.perf_counter() - started,
            "train_command": shlex.join(["nmt-train", *train[1:]]),
            "generate_command": shlex.join(["nmt-generate", *generate[1:]])}


@contextmanager
def locked_folder(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder`` (flock on its descriptor) while the block runs; it waits for another holder
    (nmt.checkpoint.save_dir's lock refuses instead, so it does not serve here)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


class Table:
    """The finished runs of a study (OUT_DIR/results.json: the settings they were made with, and a record per
    run). examples/recipes.py keeps its runs in one too."""

    def __init__(self, path: Path, settings: dict[str, Any]):
        self.path = path
        self.settings = settings
        saved = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"settings": settings, "runs": {}}
        if saved.get("settings") != settings:
            raise UsageError(f"{path}: its runs were made with other settings ({saved.get('settings')}); give another "
                             "--out-dir, or the same settings to add to them")
        self.runs: dict[str, dict[str, Any]] = saved["runs"]

    def get(self, key: str) -> Optional[dict[str, Any]]:
        return self.runs.get(key)

    def add(self, key: str, record: dict[str, Any]) -> None:
        """Keep ``record`` under ``key`` and write the file at once (an interrupted study keeps it). The runs another
        study added to the file since it was read are kept too, and the file's version of a run wins over the copy
        read at the start (a note added by hand stays): two studies of other --variants may share a record (the file
        is read again and written under a lock on its folder)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with locked_folder(self.path.parent):
            if self.path.is_file():
                self.runs = {**self.runs, **json.loads(self.path.read_text(encoding="utf-8"))["runs"]}
            self.runs[key] = record
            atomic_write_text(self.path, json.dumps({"settings": self.settings, "runs": self.runs}, indent=2) + "\n")

    def seeds_of(self, name: str) -> list[dict[str, Any]]:
        return sorted((r for r in self.runs.values() if r["variant"] == name), key=lambda r: r["seed"])

    def figures(self, name: str, metric: str) -> Optional[Figures]:
        values = [r[metric] for r in self.seeds_of(name) if r[metric] is not None]
        return Figures.of(values) if values else None


def within_noise(table: Table, name: str) -> bool:
    """Whether ``name``'s first-seed figures differ from the base's mean by no more than the base's spread
    in dev perplexity or in BLEU (so a second seed is needed to tell them apart)."""
    return "level" in compare(table, name).values()


def compare(table: Table, name: str, bleu_p: Optional[float] = None) -> dict[str, str]:
    """``name`` against the base, per metric: "better", "worse" or "level" (within the base's seed spread; for
    BLEU also when a paired bootstrap, ``bleu_p``, cannot tell the two apart at p < SIGNIFICANCE)."""
    out = {}
    for metric, lower_is_better in (("dev_ppl", True), ("test_bleu", False)):
        base, this = table.figures("base", metric), table.figures(name, metric)
        if base is None or this is None:
            out[metric] = "?"
            continue
        delta = this.mean - base.mean
        if abs(delta) <= base.spread or (metric == "test_bleu" and bleu_p is not None and bleu_p >= SIGNIFICANCE):
            out[metric] = "level"
        else:
            out[metric] = "better" if (delta < 0) == lower_is_better else "worse"
    return out


SIGNIFICANCE = 0.05


def best_translations(generate_output: str) -> list[str]:
    """The detokenized best translation of each sentence (the D- lines of nmt-generate's output), in sentence
    order."""
    best = {}
    for line in generate_output.splitlines():
        if line.startswith("D-"):
            sid, _score, text = line[2:].split("\t", 2)
            best[int(sid)] = text
    return [best[i] for i in sorted(best)]


def hypotheses(job: AblationJob, name: str, seed: int) -> Optional[list[str]]:
    """A run's translations kept in the record (None: none were kept, as for runs whose figures were copied
    into the record from the docs after their machine was gone)."""
    path = translations_path(job, name, seed)
    return path.read_text(encoding="utf-8").splitlines() if path.is_file() else None


def bleu_p_values(job: AblationJob, table: Table, names: list[str]) -> dict[str, float]:
    """Per variation, sacreBLEU's paired bootstrap (1,000 resamples of the test sentences) of its first seed
    against the base's: the p-value that its BLEU difference is resampling noise. The base's seed spread says
    how much training varies; this says how much the test set's sampling does, which on 1,000 sentences is
    ~1.6 BLEU (95% interval). A run whose translations were not kept gives the p-value its record holds
    (``bleu_p``, measured against the base of its own machine), if any."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    from nmt.data.data_dir import kept_raw_text, resolve_langs

    seed = job.common.seed
    finished = {name: table.get(f"{name}/seed{seed}") or {} for name in names if name != "base"}
    out = {name: float(r["bleu_p"]) for name, r in finished.items() if r.get("bleu_p") is not None}
    base = hypotheses(job, "base", seed)
    if base is None:
        return out
    reference = kept_raw_text(job.data, job.gen_subset, resolve_langs(job.data, None, None)[1])
    if reference is None:
        return out
    refs = reference.read_text(encoding="utf-8").splitlines()
    for name, record in finished.items():
        this = hypotheses(job, name, seed) if record else None
        if this is None or len(this) != len(base) or len(refs) != len(base):
            continue
        if this == base:  # sacreBLEU's test degenerates (p = 1 / 1,001) on identical translations
            out[name] = 1.0
            continue
        test = PairedTest([("base", base), (name, this)], {"BLEU": BLEU()}, [refs], test_type="bs", n_samples=1000)
        _signatures, results = test()
        out[name] = float(results["BLEU"][1].p_value)
    return out


# The paper's conclusion per row, as what each variation should show on each metric against the base.
Verdicts = dict[str, dict[str, str]]  # variant -> metric -> better / worse / level
METRIC_LABELS = {"dev_ppl": "dev ppl", "test_bleu": "BLEU"}


@dataclass(frozen=True)
class Expect:
    """One part of a claim: each of ``names`` should be one of ``want`` (better / worse / level) on ``metric``."""
    names: tuple[str, ...]
    metric: str
    want: frozenset[str]


def _on_both(names: tuple[str, ...], want: str) -> list[Expect]:
    return [Expect(names, metric, frozenset({want})) for metric in METRIC_LABELS]


@dataclass(frozen=True)
class Claim:
    row: str
    text: str
    parts: list[Expect]

    def judge(self, verdicts: Verdicts) -> str:
        """"holds", "not measured yet", or which variations disagree with the paper, on which metric, and how."""
        checked = [(name, part.metric, verdicts[name][part.metric] in part.want)
                   for part in self.parts for name in part.names if name in verdicts]
        if not checked:
            return "not measured yet"
        misses = [f"{name} is {verdicts[name][metric]} on {METRIC_LABELS[metric]}"
                  for name, metric, agrees in checked if not agrees]
        if not misses:
            return "holds"
        said = "does not hold here" if len(misses) == len(checked) else "holds only in part"
        return f"{said} ({'; '.join(misses)})"


CLAIMS: list[Claim] = [
    Claim("A", "single-head attention is 0.9 BLEU worse than the best setting, and quality also drops off with too "
               "many heads", _on_both(("heads_1", "heads_16"), "worse")),
    Claim("B", "reducing the attention key size d_k hurts model quality",
          _on_both(("key_dim_16", "key_dim_32"), "worse")),
    Claim("C", "bigger models are better (more layers, a wider d_model or d_ff help; fewer or narrower hurt)",
          _on_both(("layers_6", "d_model_512", "ffn_2048"), "better")
          + _on_both(("layers_1", "d_model_128", "ffn_512"), "worse")),
    Claim("D", "dropout is very helpful in avoiding over-fitting (P_drop 0 is worse)",
          _on_both(("dropout_0",), "worse")),
    Claim("D", "label smoothing hurts perplexity but improves BLEU (eps_ls 0 has the better perplexity, the worse "
               "BLEU)", [Expect(("ls_0",), "dev_ppl", frozenset({"better"})),
                         Expect(("ls_0",), "test_bleu", frozenset({"worse"}))]),
    Claim("E", "learned positional embeddings give nearly identical results to the sinusoids",
          _on_both(("learned_positions",), "level")),
    Claim("attention", "additive attention is as good as dot-product attention for small d_k (section 3.2.1); "
                       "relative positions beat absolute ones (Shaw et al. 2018)",
          [Expect(("additive",), "test_bleu", frozenset({"level", "better"})),
           Expect(("relative",), "test_bleu", frozenset({"better"}))]),
    Claim("norm", "not in the paper: pre-norm trains as well as post-norm or better on small data (Nguyen & Salazar "
                  "2019, five low-resource TED pairs; it was worse on WMT'14 En-De)",
          [Expect(("pre_norm",), "test_bleu", frozenset({"level", "better"}))]),
]


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
        ppl, bleu, chrf = (table.figures(name, m) for m in ("dev_ppl", "test_bleu", "test_chrf"))
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


def chosen(option: str, given: str, known: dict[str, Any], data: str) -> list[str]:
    """The comma-separated names of ``option``, each one of ``known``; the data-bin must exist."""
    names = [v.strip() for v in given.split(",") if v.strip()]
    unknown = [v for v in names if v not in known]
    if unknown or not names:
        raise UsageError(f"{option} {given}: unknown {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(known)}")
    if not Path(data).is_dir():
        raise UsageError(f"data-bin {data}: no such folder; run scripts/quickstart.sh first (it writes "
                         "data-bin/multi30k_en_de) or give the folder")
    return names


def with_table(doc: str, table_text: str, path: str) -> str:
    """``doc`` with the lines between its table markers replaced by ``table_text``."""
    begin, end = doc.find(DOC_BEGIN + "\n"), doc.find("\n" + DOC_END)
    if begin < 0 or end < begin:
        raise UsageError(f"--doc {path}: no '{DOC_BEGIN}' line followed by a '{DOC_END}' line; add the two lines where "
                         "the table goes")
    return doc[:begin + len(DOC_BEGIN) + 1] + table_text.rstrip("\n") + doc[end:]


def plan(job: AblationJob) -> list[str]:
    if job.doc:  # refused before any training, not after the first run
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


main = config_command("ablations.py", AblationJob, run, help=__doc__, arguments={"data": "data"})

if __name__ == "__main__":
    main()
