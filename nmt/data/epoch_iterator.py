"""Epochs over fixed batches: a fresh batch order per epoch from ``seed + epoch``, a disjoint equal
share of the batches per rank, and an exact resume point ``(epoch, offset)``.

Sharding: the epoch's shuffled batch list is dealt round-robin to the ranks and every rank gets
the same number of batches, ``len(batches) // num_shards`` (the few left over are dropped for that
epoch; a different few every epoch since the order is reshuffled). Equal counts matter: with
DistributedDataParallel a rank that steps once more than the others waits forever. Where nothing
may be dropped, ``even=False`` gives every batch exactly once with shard lengths differing by one --
right for validation, which has no collective per batch (only the final sum is all-reduced), so its
figures equal a single process's.

Collation runs in the training process by default (``num_workers=0``): ``dataset.collater`` of the
``dataset[i]`` items, with no DataLoader in the way. ``num_workers > 0`` uses a torch DataLoader
with the remaining batches as its batch sampler, and a random generator of its own (see ``_collated``);
its workers ignore the preemption signals, which the training process handles.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

from nmt.errors import ConfigError, DataError
from nmt.signals import loader_worker_signals


class EpochBatchIterator:
    """Iterate epochs of collated batches; ``state_dict()`` / ``load_state_dict()`` resume mid-epoch.

    Epochs count from 1. ``offset`` is how many of this rank's batches of ``epoch`` were handed out;
    ``next_epoch_itr()`` continues the current epoch from ``offset`` while it is unfinished and
    starts the next one otherwise. A saved offset marks the same position only with the same
    batches, seed and number of ranks; under another world size it is approximate (an offset past
    the end starts the next epoch)."""

    def __init__(self, dataset: Any, batches: Sequence[np.ndarray], *, seed: int = 1, num_shards: int = 1,
                 shard_id: int = 0, shuffle: bool = True, even: bool = True,
                 num_workers: int = 0, epoch: int = 1):
        if not 0 <= shard_id < num_shards:
            raise ConfigError(f"shard {shard_id} of {num_shards}: the rank must be in [0, world size)")
        self.dataset = dataset
        self.batches = [np.asarray(b, dtype=np.int64) for b in batches]
        self.seed = int(seed)
        self.num_shards = int(num_shards)
        self.shard_id = int(shard_id)
        self.shuffle = shuffle
        self.even = even
        self.num_workers = int(num_workers)
        self.epoch = int(epoch)
        self.offset = 0
        if not self.batches:
            raise DataError("no batches to iterate: the split is empty or every sentence was skipped as too long "
                            "(see --max-source-positions / --max-target-positions / --max-tokens)")
        if len(self) == 0 and even:
            raise DataError(f"only {len(self.batches)} batches for {num_shards} ranks: each rank would get none; "
                            "lower --max-tokens / --batch-size or use fewer ranks")

    def __len__(self) -> int:
        """Batches this rank gets per epoch (the same on every rank unless ``even=False``)."""
        n, k = len(self.batches), self.num_shards
        if not self.even:
            return len(range(self.shard_id, n, k))
        return n // k

    def batch_order(self, epoch: int) -> np.ndarray:
        """Positions into ``batches`` of the whole epoch, before sharding."""
        n = len(self.batches)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng(self.seed + epoch).permutation(n)

    def shard_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches (dataset index arrays) of ``epoch``, in order."""
        order = self.batch_order(epoch)
        mine = order[self.shard_id::self.num_shards][: len(self)]
        return [self.batches[i] for i in mine]

    def end_of_epoch(self) -> bool:
        return self.offset >= len(self)

    def next_epoch_itr(self) -> Iterator[Any]:
        """The collated samples of the rest of the current epoch, or of the next epoch when the
        current one is done. ``offset`` advances as each sample is handed out."""
        if self.end_of_epoch():
            self.epoch += 1
            self.offset = 0
        remaining = self.shard_batches(self.epoch)[self.offset:]
        return self._iterate(remaining)

    def _iterate(self, batches: list[np.ndarray]) -> Iterator[Any]:
        for sample in self._collated(batches):
            self.offset += 1
            yield sample

    def _collated(self, batches: list[np.ndarray]) -> Iterator[Any]:
        if self.num_workers <= 0:
            for batch in batches:
                yield self.dataset.collater([self.dataset[int(i)] for i in batch])
            return
        import torch
        from torch.utils.data import DataLoader

        lists = [b.tolist() for b in batches]
        # Starting a DataLoader draws its workers' base seed from the generator it is given, by default
        # torch's global one, which dropout also draws from: a run resumed mid-epoch would draw once more
        # than an uninterrupted one and get other dropout masks. A generator of its own keeps the global
        # stream untouched (and the workers' seeds a function of seed and epoch).
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        yield from DataLoader(self.dataset, batch_sampler=lists, collate_fn=self.dataset.collater,
                              num_workers=self.num_workers, generator=generator, worker_init_fn=loader_worker_signals)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch = int(state["epoch"])
        self.offset = int(state.get("offset", 0))
