"""Dynamic batching without HTTP: jobs submitted from many threads are searched together on a live source
and each gets exactly what translating its sentences alone gives; a full queue and a failing search are
reported to the jobs concerned, and the worker goes on."""

from __future__ import annotations

import multiprocessing
import threading

import pytest
import torch

from batcher_setup import TOY_SENTENCES, toy_batcher
from nmt.api import load
from nmt.generation.inference import pad_batch
from nmt.generation.search import LIVE_JOIN_EVERY, SentenceQueue
from nmt.serve import cores
from nmt.serve.batcher import Job, QueueFull
from nmt.serve.cores import SharedCores, searching_flags


@pytest.fixture(scope="module")
def model(exported_model):
    return load(str(exported_model.folder), threads=1)


def test_jobs_from_many_threads_get_what_each_sentence_gets_alone(model):
    gen = model.generation_config(beam=3)
    alone = {s: model.translate_detailed([s], beam=3)[0] for s in TOY_SENTENCES}
    worker = toy_batcher(model)
    worker.start()
    answers: dict[str, list] = {}

    def client(k: int) -> None:
        chosen = [TOY_SENTENCES[k], TOY_SENTENCES[(k + 3) % len(TOY_SENTENCES)]]
        found = worker.submit(Job(chosen, [model.encode(s) for s in chosen], gen)).result(timeout=120)
        answers[f"{k}"] = list(zip(chosen, found))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(len(TOY_SENTENCES))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    worker.close(60)
    assert len(answers) == len(TOY_SENTENCES)
    for pairs in answers.values():
        for sentence, translation in pairs:
            assert translation.source == sentence
            assert [h.tokens for h in translation.hypotheses] == [h.tokens for h in alone[sentence].hypotheses]
    assert worker.stats.sentences == 2 * len(TOY_SENTENCES)


def test_jobs_with_other_options_wait_for_their_own_search(model):
    worker = toy_batcher(model)
    wide, greedy = model.generation_config(beam=3, nbest=2), model.generation_config(beam=1)
    futures = [worker.submit(Job([s], [model.encode(s)], gen, attention=k == 0))
               for k, (s, gen) in enumerate(zip(TOY_SENTENCES, [wide, greedy] * 4))]
    worker.start()
    results = [f.result(timeout=120)[0] for f in futures]
    worker.close(60)
    assert [len(r.hypotheses) for r in results] == [2, 1] * 4
    assert results[0].attention is not None and results[1].attention is None
    assert worker.stats.streams >= 2


def test_a_full_queue_refuses_and_a_closed_one_too(model):
    gen = model.generation_config(beam=1)
    worker = toy_batcher(model, max_queue=3)
    worker.submit(Job(TOY_SENTENCES[:2], [model.encode(s) for s in TOY_SENTENCES[:2]], gen))
    with pytest.raises(QueueFull, match="at most 3"):
        worker.submit(Job(TOY_SENTENCES[2:4], [model.encode(s) for s in TOY_SENTENCES[2:4]], gen))
    worker.start()
    worker.close(60)
    with pytest.raises(QueueFull, match="shutting down"):
        worker.submit(Job(TOY_SENTENCES[:1], [model.encode(TOY_SENTENCES[0])], gen))


def test_a_failing_search_fails_its_jobs_and_the_worker_goes_on(model, monkeypatch):
    gen = model.generation_config(beam=2)
    worker = toy_batcher(model)
    translator = model.translator(gen)
    original = translator.translate_stream
    calls = []

    def broken_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return original(*args, **kwargs)

    monkeypatch.setattr(translator, "translate_stream", broken_once)
    worker.start()
    failed = worker.submit(Job(TOY_SENTENCES[:1], [model.encode(TOY_SENTENCES[0])], gen))
    with pytest.raises(RuntimeError, match="boom"):
        failed.result(timeout=60)
    fine = worker.submit(Job(TOY_SENTENCES[:1], [model.encode(TOY_SENTENCES[0])], gen)).result(timeout=60)
    worker.close(60)
    assert fine[0].hypotheses


class Live:
    """A live source: what was put in it so far, then StopIteration until more comes."""

    capacity = 8

    def __init__(self):
        self.waiting: list = []

    def put(self, ids: list[int]) -> None:
        rows = [torch.tensor([5 + i, 2]) for i in ids]
        self.waiting.append((ids, *pad_batch(rows, 1)))

    def __iter__(self):
        return self

    def __next__(self):
        if not self.waiting:
            raise StopIteration
        return self.waiting.pop(0)


def test_a_live_source_starts_sentences_every_few_steps_and_never_beyond_capacity():
    source = Live()
    queue = SentenceQueue(source, pad=1, refill=True)
    source.put([0, 1])
    assert queue.take(0)[0] == [0, 1]  # nothing runs: start at once
    source.put([2])
    assert queue.take(8, LIVE_JOIN_EVERY) is None  # no room
    assert queue.take(7, LIVE_JOIN_EVERY - 1) is None  # the last sentences started too recently
    assert queue.take(7, LIVE_JOIN_EVERY)[0] == [2]
    source.put(list(range(3, 13)))
    assert queue.take(2, LIVE_JOIN_EVERY)[0] == [3, 4, 5, 6, 7, 8]  # up to capacity
    assert queue.take(0)[0] == [9, 10, 11, 12]
    assert queue.take(0) is None and queue.empty()


class Trickle:
    """A live source that hands the search one sentence per step (then StopIteration until the next step)."""

    capacity = 8

    def __init__(self, rows: list[torch.Tensor]):
        self.rows = list(enumerate(rows))
        self.calls = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.calls += 1
        if not self.rows or self.calls % 2 == 0:
            raise StopIteration
        i, row = self.rows.pop(0)
        return [i], *pad_batch([row], 1)


def test_sentences_that_trickle_in_get_what_each_gets_alone_and_long_ones_are_kept_apart(model, monkeypatch):
    from nmt.plugins.search import beam

    gen = model.generation_config(beam=3, min_len=4)  # every sentence runs a few steps: some outlive the others
    sentences = [f"{s} {t}" for s in TOY_SENTENCES for t in TOY_SENTENCES[:3]]
    rows = [model.encode(s) for s in sentences]
    alone = [dict(model.translator(gen).translate_stream([([0], *pad_batch([row], 1))]))[0] for row in rows]
    split = []
    original = beam.BeamSearch._split_long

    def counted(self, ens, beams):
        kept, old = original(self, ens, beams)
        if old is not None:
            split.append((kept.ids, old.ids))
        return kept, old

    monkeypatch.setattr(beam.BeamSearch, "_split_long", counted)
    monkeypatch.setattr(beam, "LIVE_LONG_MIN", 2)  # this model's outputs are short
    monkeypatch.setattr(beam, "LIVE_LONG", 1.5)
    found = dict(model.translator(gen).translate_stream(Trickle(rows)))
    assert split  # some sentences were kept apart ...
    for i, hyps in enumerate(alone):  # ... and every sentence got what it gets alone
        assert [h.tokens.tolist() for h in found[i]] == [h.tokens.tolist() for h in hyps]
        assert [h.score for h in found[i]] == pytest.approx([h.score for h in hyps], abs=1e-4)


def test_a_worker_searching_alone_borrows_the_idle_workers_threads(model, monkeypatch):
    """--workers 2, one thread each: a search gets both threads while the other worker idles, drops to its own
    between steps once the other starts searching, and keeps only its own once done."""
    monkeypatch.setattr(cores, "usable_cores", lambda: 2)
    flags = searching_flags(multiprocessing.get_context("spawn"), 2)
    assert SharedCores(flags, 0, threads=2).total == 2  # never more threads than cores, whatever --threads says
    gen = model.generation_config(beam=2)
    translator = model.translator(gen)
    original = translator.translate_stream
    seen = []  # torch's threads as the search hands over each sentence

    def watched(source, **kwargs):
        for k, item in enumerate(original(source, **kwargs)):
            seen.append(torch.get_num_threads())
            if k == 1:
                flags[1] = 1  # the other worker starts searching
            yield item

    monkeypatch.setattr(translator, "translate_stream", watched)
    torch.set_num_threads(2)
    shared = SharedCores(flags, 0, threads=1)  # made before the model is loaded, ...
    torch.set_num_threads(1)  # ... which sets the worker's own threads
    worker = toy_batcher(model, max_sentences=1, cores=shared)
    try:
        future = worker.submit(Job(TOY_SENTENCES[:4], [model.encode(s) for s in TOY_SENTENCES[:4]], gen))
        worker.start()
        future.result(timeout=120)
        worker.close(60)
        assert seen == [2, 2, 1, 1]
        assert torch.get_num_threads() == 1 and list(flags) == [0, 1]
    finally:
        torch.set_num_threads(1)


def test_nmt_serve_without_its_extra_says_how_to_install_it(exported_model, monkeypatch, capsys):
    import sys

    from nmt.cli.serve import main
    from test_generate_setup import call_cli

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn now raises ImportError
    assert call_cli(main, [exported_model.folder, "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "nmt-serve: error: nmt-serve needs FastAPI and uvicorn: pip install 'nmt[serve]'"
