"""What the recipe search trains, for how long and how it scores (its command-line options)."""

from __future__ import annotations

from dataclasses import dataclass

from nmt.fields import opt
from studies.recipes.candidates import CANDIDATES


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
