"""Shared by the model-folder and Python-API tests: a tiny model nmt-train really trained on a data-bin
with Moses + subword-nmt BPE, its last two epoch checkpoints, and the folders nmt-export made of them
(one checkpoint, and the average of the two)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from test_generate_setup import call_cli, make_data_bin
from train_toy_data import TINY_MODEL, run_train

TIMING = ("translated ", "total time", "scored ")  # lines that differ between two runs of one command


@dataclass
class ExportedModel:
    raw: Path  # raw text of the data-bin: train.en/de, test.en/de
    data: Path  # the data-bin
    pair: list[Path]  # the last two epoch checkpoints
    folder: Path  # nmt-export of pair[-1]
    averaged: Path  # nmt-export of both (averaged)


def export(*argv: object) -> int:
    """nmt-export in this process; its exit code."""
    from nmt.cli.export import main

    return call_cli(main, list(argv))


def make_exported_model(root: Path) -> ExportedModel:
    raw = root / "raw"
    data = make_data_bin(raw, n_train=60, n_test=9)
    save = root / "ck"
    run_train([data, *TINY_MODEL, "--max-tokens", "256", "--max-update", "120", "--lr", "5e-3", "--warmup-updates",
               "10", "--num-threads", "1", "--valid-subset", "test", "--save-dir", save, "--log-format", "none",
               "--dropout", "0", "--label-smoothing", "0.3", "--keep-last-epochs", "2"])
    pair = sorted(save.glob("checkpoint[0-9]*.pt"), key=lambda p: int(p.stem[len("checkpoint"):]))
    assert len(pair) == 2, pair
    folder, averaged = root / "model", root / "model_avg"
    assert export(data, "--path", pair[-1], "--output", folder) == 0
    assert export(data, "--path", f"{pair[0]}:{pair[1]}", "--output", averaged) == 0
    return ExportedModel(raw, data, pair, folder, averaged)


def without_timing(text: str) -> list[str]:
    """A command's output lines, its timing lines left out."""
    return [line for line in text.splitlines() if not line.startswith(TIMING)]


def detokenized(generate_output: str) -> dict[int, str]:
    """nmt-generate's D- lines: sentence id -> detokenized hypothesis (the first of each id)."""
    found: dict[int, str] = {}
    for m in re.finditer(r"^D-(\d+)\t[^\t]*\t(.*)$", generate_output, re.M):
        found.setdefault(int(m.group(1)), m.group(2))
    return found
