"""Search strategies on stand-in models whose distributions are known."""

from __future__ import annotations

import copy

import pytest
import torch

import nmt.plugins.search.beam  # noqa: F401  (registers the strategies)
import nmt.plugins.search.greedy  # noqa: F401
import nmt.plugins.search.sampling  # noqa: F401
from nmt.config.generate import GenerationConfig
from nmt.errors import ConfigError
from nmt.generation.ensemble import EnsembleModel
from nmt.generation.search import Specials, build_search
from nmt.plugins.search.beam import BeamSearch
from nmt.registry import NoOptions
from test_search_toy_models import EOS, PAD, SPECIALS, TableModel, TinyNeuralModel

torch.set_num_threads(1)


def run(model_or_models, src, lengths, **options):
    cfg = GenerationConfig(**options)
    search = build_search(cfg, SPECIALS)
    models = model_or_models if isinstance(model_or_models, list) else [model_or_models]
    return search.search(EnsembleModel(models), src, lengths)


def batch(sentences: list[list[int]]):
    """Right-padded (B, S) source with eos appended, and lengths."""
    rows = [s + [EOS] for s in sentences]
    width = max(map(len, rows))
    src = torch.full((len(rows), width), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        src[i, : len(r)] = torch.tensor(r)
    return src, torch.tensor([len(r) for r in rows])


SENTENCES = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14], [4], [6, 6, 9, 12, 5]]

A, B, C, D, E, F = 4, 5, 6, 7, 8, 9
# Greedy takes A (0.6) and then must spread over C/D/E (0.2 each in total); B then F gives 0.4.
TRAP = {
    (): {A: 0.6, B: 0.4},
    (A,): {C: 1 / 3, D: 1 / 3, E: 1 / 3},
    (B,): {F: 1.0},
}


def test_beam_finds_the_best_sequence_greedy_misses():
    src, lengths = batch([[5]])
    greedy = run(TableModel(TRAP), src, lengths, beam=1)[0][0]
    beam = run(TableModel(TRAP), src, lengths, beam=2)[0][0]
    assert greedy.tokens.tolist()[0] == A
    assert beam.tokens.tolist() == [B, F, EOS]
    assert beam.positional_scores.sum().item() == pytest.approx(torch.tensor(0.4).log().item(), abs=1e-5)


def test_beam_one_equals_greedy():
    src, lengths = batch(SENTENCES)
    model = TinyNeuralModel(seed=3)
    greedy = run(model, src, lengths, beam=1, search={"name": "greedy"}, max_len_b=12)
    beam1 = run(model, src, lengths, beam=1, search={"name": "beam"}, max_len_b=12)
    beam_code = BeamSearch(NoOptions(), GenerationConfig(beam=1, max_len_b=12), Specials.of(SPECIALS))
    beam_code.greedy = None  # the beam code itself, not its greedy fast path
    forced_beam = beam_code.search(EnsembleModel([model]), src, lengths)
    for g, b, fb in zip(greedy, beam1, forced_beam):
        assert g[0].tokens.tolist() == b[0].tokens.tolist() == fb[0].tokens.tolist()
        assert g[0].score == pytest.approx(fb[0].score, abs=1e-5)
        assert torch.allclose(g[0].positional_scores, fb[0].positional_scores, atol=1e-5)


def test_nbest_returns_distinct_hypotheses_sorted_by_score():
    src, lengths = batch(SENTENCES)
    out = run(TinyNeuralModel(seed=1), src, lengths, beam=5, nbest=3, max_len_b=10)
    for hyps in out:
        assert len(hyps) == 3
        assert len({tuple(h.tokens.tolist()) for h in hyps}) == 3
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        for h in hyps:
            assert h.tokens[-1].item() == EOS and len(h.positional_scores) == len(h.tokens)
            assert h.score == pytest.approx(h.positional_scores.sum().item() / len(h.tokens), abs=1e-4)


@pytest.mark.parametrize("strategy", ["beam", "greedy"])
def test_batched_equals_one_sentence_at_a_time(strategy):
    model = TinyNeuralModel(seed=5)
    src, lengths = batch(SENTENCES)
    beam = 4 if strategy == "beam" else 1
    together = run(model, src, lengths, beam=beam, nbest=beam, search={"name": strategy}, max_len_a=1.5,
                   max_len_b=3)
    for i, sentence in enumerate(SENTENCES):
        alone = run(model, *batch([sentence]), beam=beam, nbest=beam, search={"name": strategy},
                    max_len_a=1.5, max_len_b=3)[0]
        assert [h.tokens.tolist() for h in together[i]] == [h.tokens.tolist() for h in alone]
        assert [h.score for h in together[i]] == pytest.approx([h.score for h in alone], abs=1e-5)


def test_ensemble_of_a_model_with_itself_equals_the_model():
    model = TinyNeuralModel(seed=7)
    src, lengths = batch(SENTENCES)
    single = run(model, src, lengths, beam=3, nbest=3, max_len_b=8)
    double = run([model, copy.deepcopy(model)], src, lengths, beam=3, nbest=3, max_len_b=8)
    for s, d in zip(single, double):
        assert [h.tokens.tolist() for h in s] == [h.tokens.tolist() for h in d]
        assert [h.score for h in s] == pytest.approx([h.score for h in d], abs=1e-5)


def test_ensemble_averages_probabilities():
    sure = TableModel({(): {4: 0.9, 5: 0.1}})
    unsure = TableModel({(): {4: 0.1, 5: 0.9}})
    src, lengths = batch([[5]])
    ens = EnsembleModel([sure, unsure])
    lprobs, _ = ens.step(torch.tensor([[0]]), ens.encode(src, lengths), ens.new_states())
    assert lprobs[0, 4].exp().item() == pytest.approx(0.5, abs=1e-5)


def test_length_limits():
    model = TinyNeuralModel(seed=2)
    src, lengths = batch(SENTENCES)
    for strategy, beam in (("beam", 3), ("greedy", 1)):
        out = run(model, src, lengths, beam=beam, search={"name": strategy}, max_len_a=0, max_len_b=3, min_len=3)
        assert all(len(h[0].tokens) == 4 for h in out)  # exactly 3 tokens, then the forced eos


def test_no_repeat_ngram_and_unkpen():
    loop = TableModel({}, default={4: 0.9, EOS: 0.1})  # wants 4 4 4 4 ...
    src, lengths = batch([[5]])
    out = run(loop, src, lengths, beam=2, max_len_b=6, no_repeat_ngram_size=2)[0][0]
    assert out.tokens.tolist() == [4, 4, EOS]  # a second "4 4" bigram is blocked
    unk = TableModel({(): {3: 0.7, 4: 0.3}, (3,): {EOS: 1.0}, (4,): {EOS: 1.0}})
    assert run(unk, src, lengths, beam=1)[0][0].tokens.tolist() == [3, EOS]
    assert run(unk, src, lengths, beam=1, unkpen=5.0)[0][0].tokens.tolist() == [4, EOS]


def test_lenpen_prefers_longer_outputs_when_raised():
    table = {(): {6: 0.5, 4: 0.5}, (6,): {EOS: 1.0}, (4,): {5: 0.9, EOS: 0.1}, (4, 5): {EOS: 1.0}}
    src, lengths = batch([[5]])
    short = run(TableModel(table), src, lengths, beam=2, lenpen=0.0)[0][0]
    long = run(TableModel(table), src, lengths, beam=2, lenpen=2.0)[0][0]
    assert short.tokens.tolist() == [6, EOS] and long.tokens.tolist() == [4, 5, EOS]


def test_sampling_is_seeded_and_topk_one_is_greedy():
    model = TinyNeuralModel(seed=4)
    src, lengths = batch(SENTENCES)
    sampling = {"name": "sampling", "sampling_topk": -1, "temperature": 1.0}

    def sample(seed, **plugin):
        cfg = GenerationConfig(beam=3, nbest=3, max_len_b=8, search={**sampling, **plugin})
        return build_search(cfg, SPECIALS, seed=seed).search(EnsembleModel([model]), src, lengths)

    toks = lambda out: [[h.tokens.tolist() for h in hs] for hs in out]  # noqa: E731
    assert toks(sample(1)) == toks(sample(1))
    assert toks(sample(1)) != toks(sample(2))
    greedy = run(model, src, lengths, beam=1, max_len_b=8)
    for hyps, g in zip(sample(9, sampling_topk=1), greedy):
        assert all(h.tokens.tolist() == g[0].tokens.tolist() for h in hyps)
    for hyps, g in zip(sample(9, sampling_topp=1e-6), greedy):
        assert all(h.tokens.tolist() == g[0].tokens.tolist() for h in hyps)


def test_bad_options_are_refused():
    with pytest.raises(ConfigError, match="--nbest"):
        build_search(GenerationConfig(beam=2, nbest=3), SPECIALS)
    with pytest.raises(ConfigError, match="unknown search"):
        build_search(GenerationConfig(search={"name": "bean"}), SPECIALS)


class CountingModel(TableModel):
    """Emits token 4 until a row has as many tokens as its source (eos and all), then eos. ``endless``: never
    eos, and every step asserts that no row is fed more tokens than its source's length (its limit in the test)."""

    def __init__(self, endless: bool = False):
        super().__init__({})
        self.endless = endless

    def encoder(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> dict:
        return {"len": src_lengths.clone()}

    def decoder(self, prev: torch.Tensor, enc: dict, incremental_state: dict | None = None) -> torch.Tensor:
        self._check_and_extend(prev, incremental_state)
        generated = prev.size(1) - 1
        assert not self.endless or generated <= int(enc["len"].min()), "a row was decoded past its length limit"
        logits = torch.full((prev.size(0), 16), -1e9)
        done = (enc["len"] <= generated) & (not self.endless)
        logits[:, 4] = torch.where(done, -1e9, 0.0)
        logits[:, EOS] = torch.where(done, 0.0, -1e9)
        return logits.unsqueeze(1)  # (N, 1, V)


def reorders_while(monkeypatch, share: float, model, src, lengths, **options) -> tuple[list, int]:
    """The greedy search's hypotheses (tokens) with ``FINISHED_SHARE`` at ``share``, and its cache reorders."""
    import nmt.generation.path_search as path_search

    monkeypatch.setattr(path_search, "FINISHED_SHARE", share)
    calls = []
    original = EnsembleModel.reorder_states

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(EnsembleModel, "reorder_states", counted)
    hyps = run(model, src, lengths, beam=1, **options)
    return [h[0].tokens.tolist() for h in hyps], len(calls)


def test_finished_rows_leave_the_batch_in_groups(monkeypatch):
    src, lengths = batch([[5] * n for n in range(16)])  # row i ends after i + 1 tokens of 4, one row per step
    at_once, copies_at_once = reorders_while(monkeypatch, 0.0, CountingModel(), src, lengths)
    grouped, copies_grouped = reorders_while(monkeypatch, 1 / 8, CountingModel(), src, lengths)
    assert grouped == at_once == [[4] * (n + 1) + [EOS] for n in range(16)]
    assert copies_at_once == 15  # every step but the last, whose row is the last one
    assert copies_grouped == 11  # two rows at a time while there are more than 8 (16 -> 8: 4 copies), then one


def test_a_finished_row_leaves_at_once_at_its_length_limit(monkeypatch):
    """Even when finished rows may wait (FINISHED_SHARE 1), one that another step would take past its limit
    leaves: the model fails if a row is fed more tokens than its limit (its source length here)."""
    src, lengths = batch([[5] * n for n in (0, 3, 6)])
    hyps, _ = reorders_while(monkeypatch, 1.0, CountingModel(endless=True), src, lengths, max_len_a=1, max_len_b=0)
    assert hyps == [[4] * n + [EOS] for n in (1, 4, 7)]
