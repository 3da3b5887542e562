"""The validation loss of a checkpoint (nmt-validate DATA --path CKPT), computed as nmt-train's
validation computes it: the checkpoint's own criterion (label smoothing included), no dropout,
loss and nll_loss in bits per target token. Compares checkpoints trained apart from one run's
validation, e.g. an averaged checkpoint against checkpoint_best.pt. With --scoring it also translates
each split (nmt-generate's search options: --beam, --lenpen, ...) and prints sacreBLEU's detokenized
BLEU and chrF2 and the scorers named (bleu_lc_tok: the Multi30k papers' lowercased, tokenized BLEU).

\b
  nmt-validate data-bin/multi30k_en_de --path checkpoints/m30k/checkpoint_best.pt
  valid on 'valid' subset | loss 3.912 | nll_loss 2.345 | ppl 5.08 | ... | checkpoint_best.pt
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, cast

import click
import torch

from nmt.cli.common import config_command
from nmt.cli.generate import SKIP_INVALID, skipped_line
from nmt.config.model import ModelConfig
from nmt.config.validate import ValidateJob

if TYPE_CHECKING:
    from nmt.data.data_bin import DataDir
    from nmt.data.language_pair_dataset import LanguagePairDataset
    from nmt.scoring import Scorer
    from nmt.training.criterion import Criterion


def checkpoint_criterion(path: str, state: Optional[dict[str, Any]], padding_idx: int) -> Criterion:
    """The criterion the checkpoint was trained with: from its stored config (``state``, the checkpoint
    read once for the model too), or from the manifest of a model folder (``state`` None)."""
    from nmt.model_folder.layout import read_manifest
    from nmt.training.criterion import build_criterion

    if state is None:
        group = read_manifest(path).get("criterion")
    else:
        group = (state.get("config") or {}).get("criterion")
    group = group or {"name": "label_smoothed_cross_entropy"}
    return build_criterion(dict(group), padding_idx)


def batches_that_fit(model: torch.nn.Module, dataset: LanguagePairDataset, cfg: ValidateJob, subset: str,
                     skip: bool) -> Any:
    """The batch plan of ``dataset``: a sentence longer than the model's positions or bigger than
    --max-tokens is refused naming --skip-invalid-size-inputs-valid-test, or with it skipped and counted."""
    from nmt.data.batching import batch_by_size
    from nmt.errors import DataError
    from nmt.generation.guards import check_lengths

    model_cfg = cast(ModelConfig, model.cfg)  # every model keeps its config; nn.Module's typing can't say so
    limits = {"source": int(model_cfg.max_source_positions), "target": int(model_cfg.max_target_positions)}
    assert dataset.tgt_sizes is not None  # load_language_pair opens both sides
    if not skip:
        fix = f"pass {SKIP_INVALID} to skip such sentences"
        check_lengths(dataset.src_sizes, limits["source"], lambda k: f"{subset}: sentence {k}", "source", fix)
        check_lengths(dataset.tgt_sizes, limits["target"], lambda k: f"{subset}: sentence {k}", "target", fix)
    plan = batch_by_size(dataset.src_sizes, dataset.tgt_sizes, max_tokens=cfg.max_tokens,
                         max_sentences=cfg.batch_size, seed=None, max_source_positions=limits["source"],
                         max_target_positions=limits["target"], skip_invalid=skip, split=subset)
    if plan.num_skipped:
        positions = f"{limits['source']} source / {limits['target']} target positions"
        click.echo(skipped_line(plan.num_skipped, len(dataset), subset, positions), err=True)
    if not plan.num_sentences:
        raise DataError(f"{subset}: every sentence was skipped; nothing to score")
    return plan


@torch.no_grad()
def split_figures(model: torch.nn.Module, criterion: Criterion, dataset: LanguagePairDataset, cfg: ValidateJob,
                  subset: str) -> dict[str, Any]:
    """loss, nll_loss (bits per token), ppl and speed of ``model`` over ``dataset``."""
    from nmt.generation.inference import autocast
    from nmt.training.metrics import ValidMeter

    plan = batches_that_fit(model, dataset, cfg, subset, cfg.skip_invalid_size_inputs_valid_test)
    model.eval()
    criterion.eval()
    meter = ValidMeter(criterion)
    for indices in plan.batches:
        sample = dataset.collater([dataset[int(i)] for i in indices])
        with autocast(cfg.bf16):
            _, _, log = criterion(model, sample)
        meter.add(log)
    return meter.summary(num_updates=0)


def figures_line(subset: str, stats: dict[str, Any], path: str) -> str:
    """fairseq-validate's summary line, with the checkpoint's name at the end."""
    from nmt.training.metrics import format_value

    keys = ("loss", "nll_loss", "ppl", "wps", "wpb", "bsz")
    return " | ".join([f"valid on '{subset}' subset"] + [f"{k} {format_value(k, stats[k])}" for k in keys] +
                      [Path(path).name])


def score_split(model: torch.nn.Module, data: DataDir, dataset: LanguagePairDataset, cfg: ValidateJob, subset: str,
                scorers: list[Scorer], name: str) -> list[str]:
    """--scoring: translate ``dataset`` with the search options and score it against its raw reference text
    (else its target side decoded), as nmt-generate scores a split."""
    from nmt.data.text_pipeline import load_text_pipeline
    from nmt.scoring import score_lines
    from nmt.training.validation_bleu import split_references, translate_split

    detok = load_text_pipeline(str(data.path), data.tgt).decode
    hyps = translate_split(model, data, dataset, subset, cfg.generation, cfg.common.seed, detok,
                           max_tokens=cfg.max_tokens, batch_size=cfg.batch_size,
                           skip_invalid=cfg.skip_invalid_size_inputs_valid_test, flag="--scoring")
    refs, kept = split_references(data, subset, dataset, detok)
    ids = sorted(hyps)
    against = str(kept) if kept is not None else "the decoded target side"
    return score_lines(scorers, [hyps[i] for i in ids], [refs[i] for i in ids],
                       f"Validate {subset} with beam={cfg.generation.beam}, {name}", against)


def run(cfg: ValidateJob) -> None:
    from nmt.checkpoint.format import load_checkpoint
    from nmt.cpu_speed import swap_layers
    from nmt.data.data_bin import open_data_dir
    from nmt.data.language_pair_dataset import load_language_pair
    from nmt.errors import UsageError
    from nmt.generation.loading import checkpoint_paths, load_model, refuse_model_folder_as_data
    from nmt.model_folder.layout import is_model_folder
    from nmt.scoring import build_scorers

    if not cfg.data:
        raise UsageError("DATA is required: the data-bin folder written by nmt-preprocess, "
                         "e.g. nmt-validate data-bin/multi30k_en_de --path CKPT")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.common.seed)
    refuse_model_folder_as_data(cfg.data, cfg.valid_subset)
    data = open_data_dir(cfg.data, cfg.source_lang, cfg.target_lang)
    subsets = [s for s in cfg.valid_subset.split(",") if s]
    datasets = {s: load_language_pair(data.path, s, data.src, data.tgt) for s in subsets}
    scorers = build_scorers(cfg.scoring, data.tgt) if cfg.scoring else []  # a bad name stops before any work
    for path in checkpoint_paths(cfg.path):
        start = time.perf_counter()
        state = None if is_model_folder(path) else load_checkpoint(path)  # read once: weights and criterion
        model = swap_layers(load_model(path, data.src_dict, data.tgt_dict, state))  # bf16: products on bucketed rows
        criterion = checkpoint_criterion(path, state, data.tgt_dict.pad())
        for subset, dataset in datasets.items():
            stats = split_figures(model, criterion, dataset, cfg, subset)
            click.echo(figures_line(subset, stats, path))
            if scorers:
                click.echo("\n".join(score_split(model, data, dataset, cfg, subset, scorers, Path(path).name)))
        click.echo(f"scored {Path(path).name} in {time.perf_counter() - start:.1f}s", err=True)


main = config_command("nmt-validate", ValidateJob, run, help=__doc__, arguments={"data": "data"})

if __name__ == "__main__":
    main()
