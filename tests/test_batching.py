"""Token-based batching: every sentence once, the token and sentence caps, the size multiple,
small padding, and too-long sentences skipped (with a count) or refused."""

import gzip

import numpy as np
import pytest

from nmt.data.batching import batch_by_size, filter_by_size, length_order
from nmt.errors import ConfigError, DataError
from shared_paths import MULTI30K

DATA = str(MULTI30K)


def random_sizes(n=3000, seed=0, high=120):
    rng = np.random.default_rng(seed)
    src = rng.integers(1, high, n)
    tgt = np.clip(src + rng.integers(-10, 11, n), 1, None)  # correlated, like a real corpus
    return src, tgt


def padded_cost(batch, src, tgt):
    return len(batch) * int(np.maximum(src[batch], tgt[batch]).max())


def test_every_sentence_exactly_once_and_token_cap_holds():
    src, tgt = random_sizes()
    plan = batch_by_size(src, tgt, max_tokens=1000, required_batch_size_multiple=1)
    flat = np.concatenate(plan.batches)
    assert sorted(flat.tolist()) == list(range(len(src)))
    assert plan.num_skipped == 0 and plan.num_sentences == len(src)
    assert all(padded_cost(b, src, tgt) <= 1000 for b in plan.batches)


def test_batches_are_full_and_padding_is_small():
    src, tgt = random_sizes()
    plan = batch_by_size(src, tgt, max_tokens=2000)
    cost = sum(padded_cost(b, src, tgt) for b in plan.batches)
    real = int(np.maximum(src, tgt).sum())
    assert real / cost > 0.9  # sentences of one batch have nearly the same length
    # Greedy packing: all but the last batch are more than half full.
    assert all(padded_cost(b, src, tgt) > 1000 for b in plan.batches[:-1])


def test_batch_size_cap_and_required_multiple():
    src, tgt = random_sizes()
    plan = batch_by_size(src, tgt, max_tokens=3000, max_sentences=50, required_batch_size_multiple=8)
    sizes = [len(b) for b in plan.batches]
    assert max(sizes) <= 50
    assert all(s % 8 == 0 or s < 8 for s in sizes[:-1])
    assert sorted(np.concatenate(plan.batches).tolist()) == list(range(len(src)))


def test_sentence_cap_alone_is_enough():
    src, tgt = random_sizes(n=100)
    plan = batch_by_size(src, tgt, max_tokens=None, max_sentences=16)
    assert [len(b) for b in plan.batches] == [16] * 6 + [4]


def test_a_cap_is_required():
    src, tgt = random_sizes(n=10)
    with pytest.raises(ConfigError, match="--max-tokens"):
        batch_by_size(src, tgt, max_tokens=None)
    with pytest.raises(ConfigError, match="--max-tokens 0"):
        batch_by_size(src, tgt, max_tokens=0)


def test_too_long_sentences_are_refused_naming_the_first():
    src = np.array([5, 300, 7, 400])
    tgt = np.array([5, 6, 700, 8])
    with pytest.raises(DataError, match=r"train: sentence 1 .*skip-invalid-size-inputs-valid-test"):
        batch_by_size(src, tgt, max_tokens=1000, max_source_positions=256, max_target_positions=256, split="train")


def test_too_long_sentences_are_skipped_with_a_count():
    src = np.array([5, 300, 7, 400, 9])
    tgt = np.array([5, 6, 700, 8, 9])
    plan = batch_by_size(src, tgt, max_tokens=1000, max_source_positions=256, max_target_positions=256,
                         skip_invalid=True)
    assert plan.num_skipped == 3
    assert sorted(np.concatenate(plan.batches).tolist()) == [0, 4]


def test_sentence_bigger_than_max_tokens_is_invalid():
    kept, skipped = filter_by_size(np.array([10, 50]), np.array([10, 60]), max_source_positions=1024,
                                   max_target_positions=1024, max_tokens=40, skip_invalid=True)
    assert kept.tolist() == [0] and skipped == 1


def test_source_only_sizes():
    src, _ = random_sizes(n=500)
    plan = batch_by_size(src, None, max_tokens=600)
    assert sorted(np.concatenate(plan.batches).tolist()) == list(range(500))
    assert all(len(b) * src[b].max() <= 600 for b in plan.batches)


def test_same_seed_same_batches():
    src, tgt = random_sizes()
    a = batch_by_size(src, tgt, max_tokens=1000, seed=3).batches
    b = batch_by_size(src, tgt, max_tokens=1000, seed=3).batches
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def test_empty_split():
    plan = batch_by_size(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), max_tokens=100)
    assert plan.batches == [] and plan.num_sentences == 0


def test_multi30k_sizes():
    """Real lengths (whitespace tokens + eos) of Multi30k's training set."""
    def lengths(path):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return np.array([len(line.split()) + 1 for line in f])

    try:
        src, tgt = lengths(f"{DATA}/train.en.gz"), lengths(f"{DATA}/train.de.gz")
    except FileNotFoundError:
        pytest.skip(f"Multi30k is not in {MULTI30K}")
    plan = batch_by_size(src, tgt, max_tokens=4096, required_batch_size_multiple=8)
    assert sorted(np.concatenate(plan.batches).tolist()) == list(range(len(src)))
    cost = sum(padded_cost(b, src, tgt) for b in plan.batches)
    assert cost <= 4096 * len(plan.batches)
    assert int(np.maximum(src, tgt).sum()) / cost > 0.95


@pytest.mark.parametrize("longest", [300, 70_000])  # the radix path, and the folded-key path past 2**16
@pytest.mark.parametrize("source_only", [False, True])
def test_length_order_is_by_size_then_target_then_source_with_seeded_ties(longest, source_only):
    rng = np.random.default_rng(7)
    src = rng.integers(1, longest, 5000).astype(np.int32)
    tgt = None if source_only else rng.integers(1, longest, 5000).astype(np.int32)
    indices = np.flatnonzero(rng.random(5000) > 0.2)
    shuffled = indices[np.random.default_rng(3).permutation(len(indices))]
    t = src if tgt is None else tgt
    expected = shuffled[np.lexsort([src[shuffled], t[shuffled], np.maximum(src, t)[shuffled]])]  # stable
    assert np.array_equal(length_order(src, tgt, indices, seed=3), expected)
