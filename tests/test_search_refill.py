"""Searching a stream of batches with finished rows refilled by waiting sentences
(Search.search_stream): every sentence must get exactly what it gets when its batch is searched
alone, although its rows share the key/value cache with sentences that started earlier
(right-aligned, left pads masked, positions counted per row)."""

from __future__ import annotations

import os

import pytest
import torch

import nmt.generation.search as search_module
from nmt.config.generate import GenerationConfig
from nmt.cpu_speed.memory import KERNEL_CACHE_CAPACITY, keep_built_kernels, keep_freed_memory
from nmt.generation.ensemble import EnsembleModel
from nmt.generation.loading import load_ensemble
from nmt.generation.search import build_search
from nmt.models import decoder_cache
from nmt.models.attention import AttentionBase
from nmt.registry import NoOptions
from test_generate_setup import make_checkpoint, make_data_bin, split_batches

torch.set_num_threads(1)
N_TEST = 23
BATCH = 4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("refill")
    data_bin = make_data_bin(folder, n_test=N_TEST)
    data, batches = split_batches(data_bin, BATCH)
    paths = [str(make_checkpoint(data_bin, folder / f"{n}.pt", seed=n)) for n in (0, 1)]
    return data, batches, paths


def run(search, ens, batches, refill: bool, monkeypatch, refill_at: float = 0.5,
        merges: list | None = None) -> tuple[dict, int]:
    """{sentence id: [(tokens, score, positional scores)]} and how many merges happened (each merge's keyword
    arguments are appended to ``merges`` when given)."""
    monkeypatch.setattr(search_module, "REFILL_AT", refill_at if refill else 0.0)
    merges = [] if merges is None else merges
    original = EnsembleModel.merge

    def counting(self, *args, **kwargs):
        merges.append(kwargs)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(EnsembleModel, "merge", counting)
    out = {i: [(h.tokens.tolist(), h.score, h.positional_scores) for h in hyps]
           for i, hyps in search.search_stream(ens, batches)}
    return out, len(merges)


def assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b) == list(range(N_TEST))
    for sid in a:
        assert [t for t, _, _ in a[sid]] == [t for t, _, _ in b[sid]], sid
        assert [s for _, s, _ in a[sid]] == pytest.approx([s for _, s, _ in b[sid]], abs=1e-4)
        for (_, _, pa), (_, _, pb) in zip(a[sid], b[sid]):
            assert torch.allclose(pa, pb, atol=1e-4)


@pytest.mark.parametrize("models", [1, 2])
def test_greedy_with_refill_equals_batch_by_batch(setup, monkeypatch, models):
    data, batches, paths = setup
    ens = load_ensemble(":".join(paths[:models]), data.src_dict, data.tgt_dict)
    assert ens.can_merge
    search = build_search(GenerationConfig(beam=1, max_len_a=1.5, max_len_b=3), data.tgt_dict)
    alone, merges_off = run(search, ens, batches, refill=False, monkeypatch=monkeypatch)
    refilled, merges_on = run(search, ens, batches, refill=True, monkeypatch=monkeypatch)
    assert merges_off == 0 and merges_on > 0
    assert_same(refilled, alone)


def test_greedy_with_refill_attending_in_windows_equals_batch_by_batch(setup, monkeypatch):
    """The rows that joined later skip the cache positions they do not own (KeyWindow), at every step that
    has them: the hypotheses and scores are those of searching each batch alone."""
    data, batches, paths = setup
    ens = load_ensemble(paths[0], data.src_dict, data.tgt_dict)
    search = build_search(GenerationConfig(beam=1, max_len_a=1.5, max_len_b=3), data.tgt_dict)
    alone, _ = run(search, ens, batches, refill=False, monkeypatch=monkeypatch)
    monkeypatch.setattr(decoder_cache, "WINDOW_MIN_SKIPPED", 0)
    monkeypatch.setattr(decoder_cache, "WINDOW_MIN_SHARE", 0.0)
    windows = []
    original = AttentionBase._attend_in_window

    def counting(self, *args):
        windows.append(args[-1])
        return original(self, *args)

    monkeypatch.setattr(AttentionBase, "_attend_in_window", counting)
    refilled, merges = run(search, ens, batches, refill=True, monkeypatch=monkeypatch)
    assert merges > 0 and windows
    assert_same(refilled, alone)


@pytest.mark.parametrize("models", [1, 2])
def test_beam_with_refill_equals_batch_by_batch(setup, monkeypatch, models):
    """Beam search does not refill by default (slower on the CPU, see BeamSearch.refill), but
    merging beams must stay correct: sentences of several ages share one cache (each member's own)."""
    data, batches, paths = setup
    ens = load_ensemble(":".join(paths[:models]), data.src_dict, data.tgt_dict)
    search = build_search(GenerationConfig(beam=3, nbest=3, max_len_a=1.5, max_len_b=3), data.tgt_dict)
    assert type(search).refill is False
    alone, _ = run(search, ens, batches, refill=True, monkeypatch=monkeypatch)
    monkeypatch.setattr(type(search), "refill", True)
    refilled, merges = run(search, ens, batches, refill=True, monkeypatch=monkeypatch)
    assert merges > 0
    assert_same(refilled, alone)


def test_beam_sentences_join_in_the_step_where_others_leave(setup, monkeypatch):
    """Refilling whenever a sentence has left, sentences start in steps where others finish: the reorder that
    drops the finished ones' rows (and their encoder side) merges the new ones in the same copy."""
    data, batches, paths = setup
    ens = load_ensemble(paths[0], data.src_dict, data.tgt_dict)
    search = build_search(GenerationConfig(beam=3, nbest=3, max_len_a=1.5, max_len_b=3), data.tgt_dict)
    alone, _ = run(search, ens, batches, refill=False, monkeypatch=monkeypatch)
    monkeypatch.setattr(type(search), "refill", True)
    merges: list = []
    refilled, _ = run(search, ens, batches, refill=True, monkeypatch=monkeypatch, refill_at=1.0, merges=merges)
    assert any(m.get("encoder_order") is not None for m in merges)  # joined where others left
    assert_same(refilled, alone)


def test_sampling_with_refill_is_seeded(setup, monkeypatch):
    data, batches, paths = setup
    ens = load_ensemble(paths[0], data.src_dict, data.tgt_dict)
    cfg = GenerationConfig(beam=2, nbest=2, max_len_a=1.5, max_len_b=3, search={"name": "sampling"})
    first, merges = run(build_search(cfg, data.tgt_dict, seed=3), ens, batches, refill=True, monkeypatch=monkeypatch)
    again, _ = run(build_search(cfg, data.tgt_dict, seed=3), ens, batches, refill=True, monkeypatch=monkeypatch)
    assert merges > 0 and all(len(first[i]) == 2 for i in first)
    assert_same(first, again)


def test_translate_stream_counts_every_sentence_once(setup):
    from nmt.generation.inference import Translator

    data, batches, paths = setup
    ens = load_ensemble(paths[0], data.src_dict, data.tgt_dict)
    translator = Translator(ens, build_search(GenerationConfig(beam=1, max_len_b=8), data.tgt_dict))
    ids = [sid for sid, _ in translator.translate_stream(batches)]
    assert sorted(ids) == list(range(N_TEST)) and translator.sentences == N_TEST and translator.seconds > 0


def test_freed_memory_is_kept_on_linux():
    import sys

    assert keep_freed_memory() is sys.platform.startswith("linux")


def test_onednn_keeps_more_kernels_unless_the_user_said_how_many(monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    keep_built_kernels()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(KERNEL_CACHE_CAPACITY)
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")
    keep_built_kernels()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "64"


def test_beam_deferring_a_batchs_last_sentences_changes_nothing(setup, monkeypatch):
    """Without refill, beam search sets a batch's last few sentences aside and searches them again,
    together, after the last batch; each must still get its own batch's hypotheses."""
    data, batches, paths = setup
    ens = load_ensemble(paths[0], data.src_dict, data.tgt_dict)
    search = build_search(GenerationConfig(beam=3, nbest=2, max_len_a=1.5, max_len_b=3), data.tgt_dict)
    monkeypatch.setattr(search_module, "DEFER_AT", 0.0)
    alone, _ = run(search, ens, batches, refill=False, monkeypatch=monkeypatch)
    deferred = []
    original = search_module.SentenceQueue.defer
    monkeypatch.setattr(search_module.SentenceQueue, "defer",
                        lambda self, sentences, size: (deferred.extend(sentences), original(self, sentences, size)))
    monkeypatch.setattr(search_module, "DEFER_AT", 0.5)
    later, _ = run(search, ens, batches, refill=False, monkeypatch=monkeypatch)
    assert deferred
    assert_same(later, alone)


def test_a_strategy_with_only_search_is_streamed_batch_by_batch(setup):
    """A user strategy may implement just ``search`` (one batch); nmt-generate's stream then runs it
    batch after batch. One implementing neither method is refused when used."""
    from nmt.generation.search import Hypothesis, Search

    data, batches, paths = setup
    ens = load_ensemble(paths[0], data.src_dict, data.tgt_dict)
    seen = []

    class Echo(Search):
        def search(self, ens, src_tokens, src_lengths, need_attn=False):
            seen.append(src_tokens.size(0))
            return [[Hypothesis(row[:n], 0.0, torch.zeros(int(n)))] for row, n in zip(src_tokens, src_lengths)]

    specials = build_search(GenerationConfig(), data.tgt_dict).sp
    out = dict(Echo(NoOptions(), GenerationConfig(), specials).search_stream(ens, batches))
    assert sorted(out) == list(range(N_TEST)) and seen == [len(ids) for ids, _, _ in batches]
    with pytest.raises(NotImplementedError, match="neither"):
        Search(NoOptions(), GenerationConfig(), specials).search(ens, *batches[0][1:])


def test_an_engines_step_refills_as_the_eager_model(setup, monkeypatch):
    """An engine's member (nmt.engines.member, here over the eager step) merges rows that joined later, beams sharing
    their sentence's encoder row: refilled, it finds what each batch searched alone finds (greedy refills:
    tests/test_engine_step.py)."""
    beam = 3
    from nmt.engines.member import torch_member

    data, batches, paths = setup
    model = load_ensemble(paths[0], data.src_dict, data.tgt_dict).models[0]
    ens = EnsembleModel([torch_member(model)])
    assert ens.can_merge and ens.can_share_encoder
    search = build_search(GenerationConfig(beam=beam, nbest=beam, max_len_a=1.5, max_len_b=3), data.tgt_dict)
    alone, _ = run(search, ens, batches, refill=False, monkeypatch=monkeypatch)
    monkeypatch.setattr(type(search), "refill", True)
    refilled, merges = run(search, ens, batches, refill=True, monkeypatch=monkeypatch, refill_at=1.0)
    assert merges > 0
    assert_same(refilled, alone)
