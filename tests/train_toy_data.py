"""Toy translation tasks for the training tests: random token strings and their copy or reversal,
binarized through the real nmt-preprocess, plus a helper that runs the real nmt-train CLI."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

# A small fast model: enough to learn copying short strings within a minute on one CPU core.
TINY_MODEL = ["--arch", "transformer_tiny", "--encoder-layers", "1", "--decoder-layers", "1",
              "--share-all-embeddings", "--no-progress-bar"]


def make_toy_task(folder: Path, *, n_train: int = 1000, n_valid: int = 64, vocab: int = 16, min_len: int = 3,
                  max_len: int = 8, reverse: bool = False, seed: int = 0, more_valid: tuple[int, ...] = ()) -> Path:
    """Write src/tgt text (tgt = src copied or reversed) and binarize it; returns the data-bin.
    ``more_valid``: the sizes of further validation splits valid1, valid2, ..."""
    from nmt.cli.preprocess import main as preprocess

    rng = random.Random(seed)
    words = [f"t{i}" for i in range(vocab)]
    folder.mkdir(parents=True, exist_ok=True)
    valid_splits = [("valid", n_valid)] + [(f"valid{i}", n) for i, n in enumerate(more_valid, 1)]
    for split, n in [("train", n_train), *valid_splits]:
        with open(folder / f"{split}.src", "w") as fs, open(folder / f"{split}.tgt", "w") as ft:
            for _ in range(n):
                tokens = [rng.choice(words) for _ in range(rng.randint(min_len, max_len))]
                fs.write(" ".join(tokens) + "\n")
                ft.write(" ".join(reversed(tokens) if reverse else tokens) + "\n")
    dest = folder / "bin"
    try:
        preprocess(["--source-lang", "src", "--target-lang", "tgt", "--trainpref", str(folder / "train"),
                    "--validpref", ",".join(str(folder / s) for s, _ in valid_splits), "--destdir", str(dest),
                    "--joined-dictionary"])
    except SystemExit as e:
        assert e.code in (0, None), f"nmt-preprocess exited with {e.code}"
    return dest


def call_train(argv: list[Any]) -> int:
    """nmt-train in this process, through the real CLI (click + config layers); its exit code."""
    from nmt.cli.train import main

    try:
        main([str(a) for a in argv])
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        return 1  # sys.exit("message")
    return 0


def run_train(argv: list[Any]) -> None:
    """nmt-train in this process; fails the test on a non-zero exit."""
    code = call_train(argv)
    assert code == 0, f"nmt-train exited with {code}"


def read_log(save_dir: Path, kind: str | None = None) -> list[dict[str, Any]]:
    """The JSON lines nmt-train wrote in save_dir (optionally only one kind)."""
    lines = [json.loads(line) for line in (Path(save_dir) / "train_log.jsonl").read_text().splitlines()]
    return [r for r in lines if kind is None or r["kind"] == kind]


def build_run(data_bin: Path, save_dir: Path, *overrides: str) -> Any:
    """A TrainingRun (model, trainer, iterators) built in this process from key=value overrides,
    for tests that drive the Trainer step by step."""
    from omegaconf import OmegaConf

    from nmt.config.loader import resolve_config
    from nmt.config.model import arch_preset
    from nmt.config.train import TrainJob
    from nmt.plugin_loader import load_plugins
    from nmt.training import distributed
    from nmt.training.loop import TrainingRun

    load_plugins()
    base = [f"task.data={data_bin}", f"checkpoint.save_dir={save_dir}", "model.arch=transformer_tiny",
            "model.encoder_layers=1", "model.decoder_layers=1", "model.share_all_embeddings=true",
            "model.dropout=0.0", "max_tokens=512", "common.no_progress_bar=true", "num_threads=1",
            "checkpoint.no_save=true"]
    cfg = OmegaConf.to_object(resolve_config(TrainJob, overrides=base + list(overrides), preset=arch_preset))
    return TrainingRun(cfg, distributed.init(cfg.distributed_training))
