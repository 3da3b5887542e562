"""Everything a training run is made of, built from its config: data, batches, model, criterion.

Kept apart from the epoch loop so that the loop reads as "train, validate, save, stop" only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nmt.config.train import TaskConfig, TrainJob
from nmt.data.batching import batch_by_size
from nmt.data.data_dir import resolve_langs
from nmt.data.data_shards import data_shards
from nmt.data.dictionary import Dictionary
from nmt.data.epoch_iterator import EpochBatchIterator
from nmt.data.language_pair_dataset import LanguagePairDataset
from nmt.data.shard_checks import check_training_shards
from nmt.data.shard_epochs import ShardEpochIterator
from nmt.training.distributed import DistributedContext

if TYPE_CHECKING:
    from torch import nn

    from nmt.training.criterion import Criterion

logger = logging.getLogger(__name__)


@dataclass
class TrainData:
    """The dictionaries and the opened splits of a data-bin (the first shard's when DATA is sharded)."""

    src_dict: Dictionary
    tgt_dict: Dictionary
    train: LanguagePairDataset  # the first shard's training split (epoch 1's)
    valid: dict[str, LanguagePairDataset] = field(default_factory=dict)  # subset -> dataset; the first picks the best
    shards: list[str] = field(default_factory=list)  # the data-bin folders of DATA (one unless sharded)
    langs: tuple[str, str] = ("", "")


def load_data(task: TaskConfig) -> TrainData:
    """Open the dictionaries, the first shard's training split and every validation split (all from
    the first shard); the other shards are checked now (language pair, split, dictionaries) and opened in
    their epoch."""
    from nmt.data.language_pair_dataset import load_language_pair

    shards = data_shards(task.data)
    src, tgt = resolve_langs(shards[0], task.source_lang, task.target_lang)
    check_training_shards(shards, src, tgt, task.train_subset)
    train = load_language_pair(shards[0], task.train_subset, src, tgt)
    valid = {}
    if not task.disable_validation:
        for subset in [s for s in task.valid_subset.split(",") if s]:
            valid[subset] = load_language_pair(shards[0], subset, src, tgt)
    return TrainData(train.src_dict, train.tgt_dict, train, valid, shards, (src, tgt))


def train_iterator(cfg: TrainJob, data: TrainData, ctx: DistributedContext) -> ShardEpochIterator:
    """The training epochs: epoch k on data shard (k - 1) mod n (the only one with a plain DATA), each
    shard opened when its epoch starts."""
    from nmt.data.language_pair_dataset import load_language_pair

    def open_shard(k: int, epoch: int) -> EpochBatchIterator:
        dataset = data.train if k == 0 else load_language_pair(data.shards[k], cfg.task.train_subset, *data.langs)
        split = cfg.task.train_subset
        if len(data.shards) > 1:
            logger.info(f"epoch {epoch}: opened data shard {k} of {len(data.shards)} ({data.shards[k]}, "
                        f"{len(dataset)} sentences)")
            split = f"{data.shards[k]}: {split}"  # errors name the shard
        return shard_iterator(cfg, dataset, ctx, epoch, split)

    return ShardEpochIterator(max(1, len(data.shards)), open_shard)


def shard_iterator(cfg: TrainJob, dataset: LanguagePairDataset, ctx: DistributedContext, epoch: int,
                   split: str) -> EpochBatchIterator:
    """One data shard's training batches (built once from the sizes) and this rank's share of each epoch;
    sentences longer than the model's positions are refused (or skipped with
    --skip-invalid-size-inputs-valid-test)."""
    task, model, seed = cfg.task, cfg.model, cfg.common.seed
    plan = batch_by_size(dataset.src_sizes, dataset.tgt_sizes, max_tokens=task.max_tokens,
                         max_sentences=task.batch_size,
                         required_batch_size_multiple=task.required_batch_size_multiple,
                         max_source_positions=model.max_source_positions,
                         max_target_positions=model.max_target_positions,
                         skip_invalid=task.skip_invalid_size_inputs_valid_test, seed=seed, split=split)
    return EpochBatchIterator(dataset, plan.batches, seed=seed, num_shards=ctx.world_size, shard_id=ctx.rank,
                              num_workers=task.num_workers, epoch=epoch)


def valid_iterator(cfg: TrainJob, subset: str, dataset: LanguagePairDataset,
                   ctx: DistributedContext) -> EpochBatchIterator:
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


def build_model_and_criterion(cfg: TrainJob, data: TrainData) -> tuple[nn.Module, Criterion]:
    """The model, with nmt's CPU forms of its layers on the same parameters (``nmt.cpu_speed.swap_layers``: before
    the optimizer, and before a checkpoint's weights and random state are restored), and the criterion."""
    from nmt.cpu_speed import swap_layers
    from nmt.models.build import build_model
    from nmt.training.criterion import build_criterion

    model = swap_layers(build_model(cfg.model, data.src_dict, data.tgt_dict))
    criterion = build_criterion(cfg.criterion, data.tgt_dict.pad())
    return model, criterion
