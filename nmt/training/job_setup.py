"""Everything a training run is made of, built from its config: data, batches, model, criterion.

Kept apart from the epoch loop so that the loop reads as "train, validate, save, stop" only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nmt.config.train import TaskConfig, TrainJob
from nmt.data.batching import batch_by_size
from nmt.data.data_dir import resolve_langs
from nmt.data.epoch_iterator import EpochBatchIterator
from nmt.training.distributed import DistributedContext


@dataclass
class TrainData:
    """The dictionaries and the opened splits of one data-bin."""

    src_dict: Any
    tgt_dict: Any
    train: Any
    valid: dict[str, Any] = field(default_factory=dict)  # subset name -> dataset, first one picks the best


def load_data(task: TaskConfig) -> TrainData:
    """Open the dictionaries, the training split and every validation split."""
    from nmt.data.language_pair_dataset import load_language_pair

    src, tgt = resolve_langs(task.data, task.source_lang, task.target_lang)
    train = load_language_pair(task.data, task.train_subset, src, tgt)
    valid = {}
    if not task.disable_validation:
        for subset in [s for s in task.valid_subset.split(",") if s]:
            valid[subset] = load_language_pair(task.data, subset, src, tgt)
    return TrainData(train.src_dict, train.tgt_dict, train, valid)


def train_iterator(cfg: TrainJob, dataset: Any, ctx: DistributedContext) -> EpochBatchIterator:
    """The training batches (built once from the sizes) and this rank's share of each epoch; sentences
    longer than the model's positions are refused (or skipped with --skip-invalid-size-inputs-valid-test)."""
    task, model, seed = cfg.task, cfg.model, cfg.common.seed
    plan = batch_by_size(dataset.src_sizes, dataset.tgt_sizes, max_tokens=task.max_tokens,
                         max_sentences=task.batch_size,
                         required_batch_size_multiple=task.required_batch_size_multiple,
                         max_source_positions=model.max_source_positions,
                         max_target_positions=model.max_target_positions,
                         skip_invalid=task.skip_invalid_size_inputs_valid_test, seed=seed, split=task.train_subset)
    return EpochBatchIterator(dataset, plan.batches, seed=seed, num_shards=ctx.world_size, shard_id=ctx.rank,
                              num_workers=task.num_workers)


def valid_iterator(cfg: TrainJob, subset: str, dataset: Any, ctx: DistributedContext) -> EpochBatchIterator:
    """Validation batches in a fixed order, each on exactly one rank (shards may differ by one batch, and a
    rank may get none: validation has no collective per batch, only the final sums are all-reduced)."""
    task, model, seed = cfg.task, cfg.model, cfg.common.seed
    plan = batch_by_size(dataset.src_sizes, dataset.tgt_sizes, max_tokens=task.max_tokens_valid or task.max_tokens,
                         max_sentences=task.batch_size_valid or task.batch_size,
                         required_batch_size_multiple=task.required_batch_size_multiple,
                         max_source_positions=model.max_source_positions,
                         max_target_positions=model.max_target_positions,
                         skip_invalid=task.skip_invalid_size_inputs_valid_test, seed=seed, split=subset)
    return EpochBatchIterator(dataset, plan.batches, seed=seed, num_shards=ctx.world_size, shard_id=ctx.rank,
                              shuffle=False, even=False, num_workers=0)


def build_model_and_criterion(cfg: TrainJob, data: TrainData) -> tuple[Any, Any]:
    from nmt.models.build import build_model
    from nmt.training.criterion import build_criterion

    model = build_model(cfg.model, data.src_dict, data.tgt_dict)
    criterion = build_criterion(cfg.criterion, data.tgt_dict.pad())
    return model, criterion
