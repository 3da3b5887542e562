"""What the ablation study trains, for how long and where its figures go (its command-line options), and the
nmt-train / nmt-generate commands of one run."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from nmt.config.common import CommonConfig
from nmt.fields import opt
from studies.ablations.doc_page import DOC_BEGIN, DOC_END
from studies.ablations.variants import VARIANTS
from studies.commands import precision_flags, thread_flags, tool
from studies.reference import BASE_FLAGS


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
    record_dir: str = opt("", "Folder of the study's record: results.json, table.md and translations.tar.xz (each "
                              "run's best translation of every test sentence, for the paired bootstrap). It is small "
                              "enough to keep in git, so a study outlives the machine its checkpoints are on. "
                              "Empty: --out-dir.")
    doc: str = opt("", "A Markdown page that shows the table itself (studies/ablations/README.md): its lines between "
                       f"'{DOC_BEGIN}' and '{DOC_END}' are rewritten with table.md's text whenever table.md is.")
    gen_subset: str = opt("test", "Split translated for BLEU (beam 5).")
    jobs: int = opt(1, "Runs trained at the same time, sharing the cores (each gets cores / N threads). On 2-core "
                       "CPUs two 1-thread runs made 1.2-1.4x the updates per hour of one 2-thread run, and 1.0x in "
                       "bf16 on one without AMX; the figures do not depend on it, so it is not a setting of the "
                       "table.", low=1)
    train_args: str = opt("", "Extra nmt-train flags for every run, one shell-quoted string (e.g. '--num-threads "
                              "2'); they come last, so they win.")


def run_dir(job: AblationJob, name: str, seed: int) -> Path:
    return Path(job.out_dir) / name / f"seed{seed}"


def record_dir(job: AblationJob) -> Path:
    return Path(job.record_dir or job.out_dir)


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
