"""The epoch iterator: a reproducible fresh order per epoch, disjoint equal shards, exact resume."""

import numpy as np
import pytest
import torch

from nmt.data.batching import batch_by_size
from nmt.data.epoch_iterator import EpochBatchIterator
from nmt.errors import DataError


class FakePairs:
    """Stands in for LanguagePairDataset: sizes, items and a collater."""

    def __init__(self, n=200, seed=0):
        rng = np.random.default_rng(seed)
        self.src_sizes = rng.integers(2, 30, n)
        self.tgt_sizes = rng.integers(2, 30, n)

    def __len__(self):
        return len(self.src_sizes)

    def __getitem__(self, i):
        return {"id": i, "source": torch.full((int(self.src_sizes[i]),), 5)}

    def collater(self, samples):
        return {"id": torch.tensor([s["id"] for s in samples]), "nsentences": len(samples)}


def make(ds=None, **kw):
    ds = ds or FakePairs()
    batches = batch_by_size(ds.src_sizes, ds.tgt_sizes, max_tokens=120).batches
    return EpochBatchIterator(ds, batches, **kw)


def ids_of(samples):
    return [tuple(s["id"].tolist()) for s in samples]


def test_an_epoch_yields_every_sentence_once():
    it = make()
    ids = [i for batch in ids_of(it.next_epoch_itr()) for i in batch]
    assert sorted(ids) == list(range(200))
    assert it.end_of_epoch() and it.state_dict() == {"epoch": 1, "offset": len(it)}


def test_order_changes_per_epoch_and_is_reproducible_from_the_seed():
    it = make(seed=7)
    epoch1 = ids_of(it.next_epoch_itr())
    epoch2 = ids_of(it.next_epoch_itr())
    assert it.epoch == 2
    assert epoch1 != epoch2 and sorted(epoch1) == sorted(epoch2)
    again = make(seed=7)
    assert ids_of(again.next_epoch_itr()) == epoch1
    assert ids_of(make(seed=8).next_epoch_itr()) != epoch1


def test_no_shuffle_keeps_the_built_order():
    it = make(shuffle=False)
    assert [b.tolist() for b in it.shard_batches(1)] == [b.tolist() for b in it.shard_batches(5)]


@pytest.mark.parametrize("num_shards", [2, 3, 7])
def test_shards_are_disjoint_and_equal_length(num_shards):
    shards = [make(seed=3, num_shards=num_shards, shard_id=r) for r in range(num_shards)]
    total = len(shards[0].batches)
    lengths = {len(s) for s in shards}
    assert lengths == {total // num_shards}
    seen = [tuple(b.tolist()) for s in shards for b in s.shard_batches(4)]
    assert len(seen) == len(set(seen)) == (total // num_shards) * num_shards


def test_resume_mid_epoch_gives_the_same_remaining_order():
    it = make(seed=5, num_shards=2, shard_id=1)
    ids_of(it.next_epoch_itr())  # epoch 1
    stream = it.next_epoch_itr()  # epoch 2
    head = [next(stream) for _ in range(3)]
    state = it.state_dict()
    assert state == {"epoch": 2, "offset": 3}
    rest = ids_of(stream)
    epoch3 = ids_of(it.next_epoch_itr())

    resumed = make(seed=5, num_shards=2, shard_id=1)
    resumed.load_state_dict(state)
    assert ids_of(resumed.next_epoch_itr()) == rest
    assert ids_of(resumed.next_epoch_itr()) == epoch3
    assert len(head) + len(rest) == len(it)


def test_resume_at_an_epoch_end_starts_the_next_epoch():
    it = make(seed=2)
    ids_of(it.next_epoch_itr())
    state = it.state_dict()
    epoch2 = ids_of(it.next_epoch_itr())
    resumed = make(seed=2)
    resumed.load_state_dict(state)
    assert ids_of(resumed.next_epoch_itr()) == epoch2 and resumed.epoch == 2


def test_dataloader_workers_give_the_same_batches():
    ds = FakePairs(n=60)
    plain = ids_of(make(ds, seed=1).next_epoch_itr())
    loaded = make(ds, seed=1, num_workers=1)
    assert ids_of(loaded.next_epoch_itr()) == plain
    assert loaded.end_of_epoch()


@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_iterating_leaves_torchs_global_random_stream_alone(num_workers):
    """Dropout draws from torch's global generator: starting an epoch (with DataLoader workers too)
    must not draw from it, or a run resumed mid-epoch gets other dropout masks than an uninterrupted one."""
    itr = make(FakePairs(n=60), seed=1, num_workers=num_workers)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    batches = itr.next_epoch_itr()
    next(batches)  # the DataLoader (and its workers) starts here
    assert torch.equal(torch.rand(3), expected)
    list(batches)


def test_too_few_batches_for_the_ranks_is_an_error():
    ds = FakePairs(n=4)
    with pytest.raises(DataError, match="lower --max-tokens"):
        make(ds, num_shards=8, shard_id=0)


def test_no_batches_is_an_error():
    with pytest.raises(DataError, match="no batches"):
        EpochBatchIterator(FakePairs(n=3), [])


def test_uneven_shards_hold_every_batch_exactly_once():
    shards = [make(num_shards=3, shard_id=r, shuffle=False, even=False) for r in range(3)]
    total = len(shards[0].batches)
    lengths = [len(s) for s in shards]
    assert sum(lengths) == total and max(lengths) - min(lengths) == 1
    seen = [i for s in shards for sample in s.next_epoch_itr() for i in sample["id"].tolist()]
    assert sorted(seen) == list(range(200))
