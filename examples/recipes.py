"""The best Multi30k en-de recipe for a training-time budget, chosen on the validation set only.

Every candidate is fairseq's reference recipe, the quickstart's until 2026-11-26 (examples/ablations.py BASE_FLAGS,
warmup 500, --max-tokens 4096; the quickstart now trains pre_norm_lr_2e-3_tokens_1024_dropout_0.2's recipe,
examples/multi30k_cpu.yaml) with a few flags changed. Each trains for --minutes of training time (nmt-train
--stop-time-hours), saving a checkpoint every 50 updates (the last 20 kept), and is scored on the valid split with
beam 5: checkpoint_best.pt, the average of the last 5 interval checkpoints (250 updates) and that of the last 20
(1,000 updates), each with every --lenpens length penalty. The `ensemble` candidate trains two models for
half the time each (seeds 1 and 2) and decodes them together, against one model trained for the whole
time (`ensemble_tokens_1024` the same with the quickstart's batches); `ensemble_side_by_side` trains the two
at the same time, each for the whole time on half the cores (the same budget of cores x time: a small model
uses two cores poorly, so each gets more than half the updates of a model trained alone). With --test, the
best (candidate, checkpoint, length penalty) on valid is translated on the test split once; a candidate that wins
on valid later has its own test translated, the earlier one kept beside it in the record.

Runs are kept in results.json as they finish, with table.md beside it, in --record-dir (default OUT_DIR; a
folder in git outlives the machine the checkpoints are on); a rerun skips them (scoring their checkpoints with
any length penalty of --lenpens they lack, while the checkpoints are still there) and an interrupted training
resumes from its checkpoint_last.pt.

\b
  python examples/recipes.py data-bin/multi30k_en_de --minutes 30
  python examples/recipes.py data-bin/multi30k_en_de --minutes 30 --candidates quickstart,lr_2e-3 --test
"""

from __future__ import annotations

import re
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))  # examples/ablations.py, run as a script or loaded
from ablations import BASE_FLAGS, Table, call, chosen, precision_flags, thread_flags, tool, train_to_end  # noqa: E402

from nmt.cli.common import config_command  # noqa: E402
from nmt.config.fields import opt  # noqa: E402
from nmt.errors import NmtError  # noqa: E402
from nmt.fileio import atomic_write_text  # noqa: E402

# the averages scored, narrowest first: name -> how many of the last interval checkpoints (every 50 updates) it spans
AVERAGES: dict[str, int] = {"average": 5, "wide_average": 20}
KEEP = max(AVERAGES.values())  # interval checkpoints kept
# Wu et al. 2021's Multi30k Transformer-Tiny (4+4 layers, d_model 128, d_ff 256, lr 5e-3, warmup 2,000; their
# 41.0 tokenized lowercased BLEU came from up to 8,000 updates): a quarter of the FLOPs per token of ours
TINY_4X128 = ("--encoder-layers", "4", "--decoder-layers", "4", "--encoder-embed-dim", "128", "--decoder-embed-dim",
              "128", "--encoder-ffn-embed-dim", "256", "--decoder-ffn-embed-dim", "256", "--lr", "5e-3",
              "--warmup-updates", "2000")
PRE_NORM_LR_2E3 = ("--encoder-normalize-before", "--decoder-normalize-before", "--lr", "2e-3")
TOKENS_1024 = ("--max-tokens", "1024")  # the quickstart's batches since 2026-11-26 (examples/multi30k_cpu.yaml)
QUICKSTART_CPU = (*PRE_NORM_LR_2E3, *TOKENS_1024, "--dropout", "0.2")  # examples/multi30k_cpu.yaml's recipe


def cosine(period_updates: int) -> tuple[str, ...]:
    """A half-cosine from the peak to 0 over ``period_updates`` after the warmup: fitted to a budget, the learning rate
    anneals within it, where inverse_sqrt ends 30 minutes at 0.26x the peak."""
    return ("--lr-scheduler", "cosine", "--lr-period-updates", str(period_updates))


LS_0_2 = ("--label-smoothing", "0.2")
# the cosine's periods: the 30 (15) minutes of the 2-core Xeon without AMX, 7,358 (3,695) updates of QUICKSTART_CPU,
# and those of the 2-core Xeon with AMX, about 9,300 (990 in 3 minutes, 2026-11-28), where ending at 7,300 would leave
# the last fifth of the budget at a learning rate of 0
COSINE_30MIN, COSINE_15MIN, COSINE_30MIN_AMX = cosine(6800), cosine(3100), cosine(8800)
BEST_30MIN = (*QUICKSTART_CPU, *COSINE_30MIN, *LS_0_2)  # the EPYC's best: test BLEU 38.82
BEST_30MIN_AMX = (*QUICKSTART_CPU, *COSINE_30MIN_AMX, *LS_0_2)
# Shaw et al.'s relative-position self-attention in place of the sinusoids (docs/ablations.md, the attention row); with
# BEST_30MIN_AMX the best found, test BLEU 40.26 (examples/multi30k_cpu_30min.yaml)
RELATIVE = ("--attention", "relative", "--max-relative-position", "16", "--positional", "none")
# name -> the flags that change the quickstart's recipe (the ensembles: two models, see ENSEMBLES)
CANDIDATES: dict[str, tuple[str, ...]] = {
    "quickstart": (),
    "ensemble": (),
    "ensemble_side_by_side": (),
    "lr_2e-3": ("--lr", "2e-3"),
    "warmup_250": ("--warmup-updates", "250"),
    "pre_norm_lr_2e-3": PRE_NORM_LR_2E3,
    "pre_norm_lr_2e-3_tokens_1024": (*PRE_NORM_LR_2E3, *TOKENS_1024),
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2": QUICKSTART_CPU,
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2_cosine_6800": (*QUICKSTART_CPU, *COSINE_30MIN),
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2_cosine_3100": (*QUICKSTART_CPU, *COSINE_15MIN),
    # the ablation study's eps_ls 0.2 was 1.2 BLEU above the base after 3,000 updates (docs/ablations.md, row D), and a
    # 30-minute run converges: on top of the best 30-minute recipe so far
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2_cosine_6800_ls_0.2": BEST_30MIN,
    # relative-position self-attention had the ablation study's lowest dev perplexity (5.43 against 5.75) and +1.1 BLEU
    # (p = 0.073) after 3,000 updates (docs/ablations.md, the attention row): on top of the best recipe so far
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2_cosine_6800_ls_0.2_relative": (*BEST_30MIN, *RELATIVE),
    # the two above with the cosine fitted to the AMX Xeon's 30 minutes
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2_cosine_8800_ls_0.2": BEST_30MIN_AMX,
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2_cosine_8800_ls_0.2_relative": (*BEST_30MIN_AMX, *RELATIVE),
    # the two changes of the best 30-minute recipe that need no fitting to the machine, for the 15-minute quickstart
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.2_ls_0.2_relative": (*QUICKSTART_CPU, *LS_0_2, *RELATIVE),
    "pre_norm_lr_2e-3_tokens_1024_dropout_0.1": (*PRE_NORM_LR_2E3, *TOKENS_1024, "--dropout", "0.1"),
    "learned_positions": ("--positional", "learned"),
    "dropout_0.2": ("--dropout", "0.2"),
    "label_smoothing_0.2": LS_0_2,
    "tokens_512": ("--max-tokens", "512"),
    "tokens_1024": TOKENS_1024,
    "tokens_2048": ("--max-tokens", "2048"),
    "tokens_8192": ("--max-tokens", "8192"),
    "ensemble_tokens_1024": TOKENS_1024,
    "tiny_4x128": TINY_4X128,
    "tiny_4x128_side_by_side": TINY_4X128,
}


@dataclass
class RecipeJob:
    """Which candidates, for how long, and how they are scored."""

    data: str = opt("data-bin/multi30k_en_de", "The data-bin folder (the quickstart writes this one).", cli=False)
    candidates: str = opt(",".join(CANDIDATES), "Comma-separated candidates, in this order. Known: "
                          + ", ".join(CANDIDATES) + ".")
    minutes: float = opt(30.0, "Training time per candidate, in minutes (the ensembles' two models share it).",
                         low=0, low_open=True)
    lenpens: str = opt("1.0", "Comma-separated length penalties each checkpoint is scored with on valid.")
    precision: str = opt("auto", "Training and decoding precision: auto is bf16 where this machine's bf16 products "
                                 "are measured faster than fp32's, else fp32.", choices=["auto", "fp32", "bf16"])
    test: bool = opt(False, "Translate --test-subset once, with the best setting on valid.")
    test_subset: str = opt("test", "The split --test translates.")
    out_dir: str = opt("runs/recipes", "Folder of one sub-folder per candidate.")
    record_dir: str = opt("", "Folder of the search's record: results.json and table.md. It is small enough to keep "
                              "in git, so a search outlives the machine its checkpoints are on. Empty: --out-dir.")
    train_args: str = opt("", "Extra nmt-train flags for every candidate, one shell-quoted string; they come last.")


# the ensembles: (the share of the time each of the two models trains, whether they train at the same time)
ENSEMBLES: dict[str, tuple[float, bool]] = {"ensemble": (0.5, False), "ensemble_tokens_1024": (0.5, False),
                                            "ensemble_side_by_side": (1.0, True),
                                            "tiny_4x128_side_by_side": (1.0, True)}


def train(job: RecipeJob, name: str, seed: int, minutes: float, save: Path, share: int) -> list[str]:
    """Train one model of candidate ``name`` into ``save``, on 1/``share`` of the cores; returns the command."""
    argv = [tool("nmt-train"), job.data, *BASE_FLAGS, "--warmup-updates", "500", "--max-tokens", "4096",
            *CANDIDATES[name], *precision_flags(job.precision), "--seed", str(seed),
            "--stop-time-hours", f"{minutes / 60:.6g}", "--save-interval-updates", "50",
            "--keep-interval-updates", str(KEEP), "--save-dir", str(save), *thread_flags("--num-threads", share),
            *shlex.split(job.train_args)]
    train_to_end(argv, f"[seed{seed}] " if share > 1 else "")
    return argv


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


def _updates(save: Path) -> int:
    from nmt.checkpoint.format import load_checkpoint

    return int(load_checkpoint(save / "checkpoint_last.pt")["training"]["num_updates"])


def candidates_run(table: Table) -> list[str]:
    """The candidates in the record, in the order they were run (whatever this run's --candidates)."""
    return [key for key in table.runs if key in CANDIDATES]


def best_setting(table: Table) -> tuple[str, str, float]:
    """(candidate, "checkpoint/lenpen", valid BLEU) of the best scored setting in the record."""
    found = [(name, setting, score) for name in candidates_run(table)
             for setting, score in table.runs[name]["valid_bleu"].items()]
    return max(found, key=lambda f: f[2])


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


def translate_test(job: RecipeJob, table: Table) -> None:
    """Translate the test split with the best setting on valid of every candidate in the record (not only
    those of this --candidates), unless the record's test is of that setting already. A test made for an
    earlier best (a candidate run later won on valid) stays in the record as test_earlier (then
    test_earlier_2, ...): every look at the test split is kept."""
    name, setting, score = best_setting(table)
    done = table.get("test")
    if done is not None and (done["candidate"], done["setting"]) == (name, setting):
        return
    kind, lenpen = setting.split("/lenpen ")
    paths = [Path(p) for p in table.get(name)["checkpoints"][kind]]  # type: ignore[index]
    if not all(p.is_file() for p in paths):
        raise NmtError(f"--test: the checkpoints of the best setting on valid ({name}, {setting}) are gone "
                       f"({paths[0]}); train {name} again (remove its run from {table.path}) to test it")
    test_bleu = bleu(job, paths, job.test_subset, lenpen, Path(job.out_dir) / name / f"test-{kind}-{lenpen}")
    if done is not None:
        key = earlier_test_key(len(earlier_tests(table)) + 1)
        table.add(key, {**done, "variant": key})
    table.add("test", {"variant": "test", "seed": 1, "candidate": name, "setting": setting, "valid_bleu": score,
                       "test_bleu": test_bleu})


def earlier_test_key(n: int) -> str:
    """The record's key of the n-th test superseded by a later best on valid."""
    return "test_earlier" if n == 1 else f"test_earlier_{n}"


def earlier_tests(table: Table) -> list[dict[str, Any]]:
    """The superseded tests, oldest first."""
    found = []
    while (earlier := table.get(earlier_test_key(len(found) + 1))) is not None:
        found.append(earlier)
    return found


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


main = config_command("recipes.py", RecipeJob, run, help=__doc__, arguments={"data": "data"})

if __name__ == "__main__":
    main()
