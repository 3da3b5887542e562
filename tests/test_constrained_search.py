"""The constrained search (nmt.plugins.search.constrained): its outputs hold the phrases asked for, in any order or
in the order given; without phrases it is beam search; a phrase that cannot fit is reported (Hypothesis.unmet),
not forced; no piece is repeated to reach a phrase where dynamic beam allocation as first written does; a batch,
a refilled stream and an ONNX step give what one sentence at a time gives; the strategies and the engine that
cannot force terms refuse them in one line."""

from __future__ import annotations

import math

import pytest
import torch

import nmt.generation.search as search_module
import nmt.plugins.search.beam  # noqa: F401  (registers the strategies)
import nmt.plugins.search.constrained  # noqa: F401
import nmt.plugins.search.greedy  # noqa: F401
import nmt.plugins.search.sampling  # noqa: F401
from engine_models import copy_batch, trained_tiny
from nmt.config.generate import GenerationConfig
from nmt.engines.translator import BatchTranslator
from nmt.errors import UsageError
from nmt.generation.constraints import SentenceConstraints, min_tokens
from nmt.generation.ensemble import EnsembleModel
from nmt.generation.inference import Translator
from nmt.generation.search import build_search
from test_search import SENTENCES, batch
from test_search_toy_models import EOS, SPECIALS, TableModel, TinyNeuralModel

torch.set_num_threads(1)
CONSTRAINED = {"name": "constrained"}


def phrases(*ids: list[int], ordered: bool = False, mid_word: torch.Tensor | None = None) -> SentenceConstraints:
    return SentenceConstraints(tuple(torch.tensor(p) for p in ids), ordered=ordered, mid_word=mid_word)


def search(model, src, lengths, constraints=None, name: str = "constrained", **options):
    cfg = GenerationConfig(**{"max_len_b": 12, **options, "search": {"name": name}})
    return build_search(cfg, SPECIALS).search(EnsembleModel([model]), src, lengths, constraints=constraints)


def hyps_of(out) -> list[list[tuple[list[int], float]]]:
    return [[(h.tokens.tolist(), h.score) for h in sentence] for sentence in out]


def holds(tokens: list[int], phrase: list[int], start: int = 0) -> int:
    """The end of the first occurrence of ``phrase`` in ``tokens`` from ``start``, or -1."""
    for i in range(start, len(tokens) - len(phrase) + 1):
        if tokens[i:i + len(phrase)] == phrase:
            return i + len(phrase)
    return -1


def in_order(tokens: list[int], c: SentenceConstraints) -> bool:
    end = 0
    for p in c.phrases:
        end = holds(tokens, p.tolist(), end)
        if end < 0:
            return False
    return True


@pytest.fixture(scope="module")
def copy_model():
    """A tiny Transformer trained for a moment to copy its source (peaked, mergeable caches)."""
    return trained_tiny("scaled_dot_product", "sinusoidal", updates=40)


@pytest.mark.parametrize("beam", [1, 2, 5])
def test_without_phrases_it_is_beam_search(beam):
    src, lengths = batch(SENTENCES)
    model = TinyNeuralModel(seed=3)
    nbest = min(beam, 3)
    plain = hyps_of(search(model, src, lengths, name="beam", beam=beam, nbest=nbest))
    none = {i: SentenceConstraints(()) for i in range(len(SENTENCES))}
    for constraints in (None, {}, none):
        out = search(model, src, lengths, constraints, beam=beam, nbest=nbest)
        assert hyps_of(out) == plain
        assert all(h.unmet == 0 for sentence in out for h in sentence)


def test_sentences_without_phrases_keep_beam_hypotheses_beside_others():
    src, lengths = batch(SENTENCES)
    model = TinyNeuralModel(seed=3)
    plain = hyps_of(search(model, src, lengths, name="beam", beam=4, nbest=2))
    out = search(model, src, lengths, {1: phrases([9, 10], [12]), 3: phrases([13, 14, 15])}, beam=4, nbest=2)
    got = hyps_of(out)
    for i in (0, 2):
        assert [t for t, _ in got[i]] == [t for t, _ in plain[i]]
        assert [s for _, s in got[i]] == pytest.approx([s for _, s in plain[i]], abs=1e-5)
    assert got[1] != plain[1] and got[3] != plain[3]


@pytest.mark.parametrize("ordered", [False, True])
def test_every_phrase_is_met_once_multi_token_ordered_or_not(copy_model, ordered):
    src, lengths = copy_batch(10, seed=7)
    g = torch.Generator().manual_seed(3)
    constraints = {i: SentenceConstraints(tuple(torch.randint(4, 24, (int(n),), generator=g)
                                                for n in torch.randint(1, 4, (3,), generator=g)), ordered=ordered)
                   for i in range(10)}
    out = search(copy_model, src, lengths, constraints, beam=5, nbest=3, max_len_a=1.5, max_len_b=10)
    for i, sentence in enumerate(out):
        c = constraints[i]
        assert len(sentence) == 3 and len({tuple(h.tokens.tolist()) for h in sentence}) == 3
        assert [h.score for h in sentence] == sorted((h.score for h in sentence), reverse=True)
        for h in sentence:
            tokens = h.tokens.tolist()
            assert h.unmet == 0 and tokens[-1] == EOS
            assert all(holds(tokens, p.tolist()) >= 0 for p in c.phrases)
            assert not ordered or in_order(tokens, c)
            assert len(tokens) - 1 >= min_tokens(c)


X, Y, A, B, Z = 4, 5, 6, 7, 8


def test_a_phrase_the_model_writes_is_met_as_written_and_order_is_kept_when_asked():
    """The model writes X Y: unordered, the phrases Y and X are met without a token forced; ordered, Y comes
    first."""
    table = {(): {X: 0.9, Y: 0.1}, (X,): {Y: 0.9, EOS: 0.1}, (X, Y): {EOS: 1.0}, (Y,): {X: 0.6, EOS: 0.4}}
    model = TableModel(table, default={EOS: 0.5, X: 0.25, Y: 0.25})
    src, lengths = batch([[9]])
    plain = search(model, src, lengths, name="beam", beam=3)[0][0]
    unordered = search(model, src, lengths, {0: phrases([Y], [X])}, beam=3)[0][0]
    ordered = search(model, src, lengths, {0: phrases([Y], [X], ordered=True)}, beam=3)[0][0]
    assert plain.tokens.tolist() == unordered.tokens.tolist() == [X, Y, EOS]
    assert unordered.score == pytest.approx(plain.score) and unordered.unmet == 0
    assert ordered.tokens.tolist() == [Y, X, EOS] and ordered.unmet == 0


def test_a_phrase_that_cannot_fit_is_reported_and_not_forced():
    src, lengths = batch([[5, 6, 7], [8, 9]])
    model = TinyNeuralModel(seed=2)
    plain = search(model, src, lengths, name="beam", beam=4, max_len_b=5)
    too_long = phrases([9, 10, 11, 12, 13, 14])  # 6 tokens, the limit is 5
    out = search(model, src, lengths, {0: too_long, 1: phrases([10, 11], [12, 13, 14, 15])}, beam=4, max_len_b=5)
    assert out[0][0].unmet == 1 and out[0][0].tokens.tolist() == plain[0][0].tokens.tolist()
    second = out[1][0].tokens.tolist()  # 2 + 4 tokens do not fit in 5: the first phrase is met, the other not
    assert out[1][0].unmet == 1 and holds(second, [10, 11]) >= 0 and holds(second, [12, 13, 14, 15]) < 0
    assert len(second) - 1 <= 5


NEXT = {None: {X: .6, Y: .3, Z: .09, A: .01}, A: {A: .85, B: .02, Z: .03, EOS: .1}, B: {EOS: .95, Z: .05},
        X: {Y: .9, A: .01, Z: .04, EOS: .05}, Y: {EOS: .9, A: .06, Z: .02, X: .02}, Z: {EOS: .9, X: .05, A: .05}}


class LoopModel(TableModel):
    """A model that writes X Y, finds A unlikely, and once it has written A loops on it (A A A ...) before it lets
    B follow: the "BergBergBerg...landschaft" of fairseq 0.12 with the phrase A B."""

    def _row(self, prefix: tuple) -> torch.Tensor:
        self.default = NEXT[prefix[-1] if prefix else None]
        return super()._row(("not in the table",))


def naive_allocation(phrase: list[int], beam: int, max_len: int) -> list[int]:
    """Dynamic beam allocation as first written, for one phrase over LoopModel: a row keeps its progress while it
    follows the phrase, restarts it at its first token, loses it at any other; beams dealt bank by bank; the best
    finished output meeting the phrase, by score / length."""
    rows, finished = [((), 0.0, 0)], []
    for step in range(max_len + 1):
        cands = {}
        for tokens, logp, progress in rows:
            for t, p in NEXT[tokens[-1] if tokens else None].items():
                if t == EOS:
                    if progress == len(phrase):
                        finished.append((tokens, logp + math.log(p)))
                elif step < max_len:
                    new = progress if progress == len(phrase) else progress + 1 if phrase[progress] == t else (
                        1 if phrase[0] == t else 0)
                    cands[tokens + (t,)] = (logp + math.log(p), new)
        banks: dict[int, list] = {}
        for tokens, (logp, b) in sorted(cands.items(), key=lambda kv: -kv[1][0]):
            banks.setdefault(b, []).append((tokens, logp, b))
        deepest = max(map(len, banks.values()), default=0)
        rows = [banks[b][i] for i in range(deepest) for b in sorted(banks, reverse=True) if i < len(banks[b])][:beam]
    return list(max(finished, key=lambda f: f[1] / (len(f[0]) + 1))[0])


@pytest.mark.parametrize("beam", [2, 4, 5])
def test_no_piece_is_repeated_to_reach_a_phrase(beam):
    naive = naive_allocation([A, B], beam=4, max_len=12)
    assert naive[:4] == [X, Y, A, A] and naive.count(A) > 3  # the case degenerates as fairseq's did
    src, lengths = batch([[9]])
    out = search(LoopModel({}), src, lengths, {0: phrases([A, B])}, beam=beam, nbest=beam)
    assert out[0][0].tokens.tolist() == ([X, Y, A, B, EOS] if beam > 2 else [X, A, B, EOS])
    for h in out[0]:
        tokens = h.tokens.tolist()
        assert h.unmet == 0 and tokens.count(A) == 1 and holds(tokens, [A, B]) >= 0


G, W = 9, 10  # G: a piece that continues its word ("Fisch@@"), W: one that ends it ("e")
GLUE = {(): {G: .9, X: .1}, (G,): {A: .5, W: .3, B: .2}, (G, A): {EOS: .9, B: .1}, (G, A, B): {EOS: 1.0},
        (G, W): {A: .5, EOS: .5}, (G, W, A): {EOS: .9, B: .1}, (G, W, A, B): {EOS: 1.0}}


class GlueModel(TableModel):
    """GLUE's table, every other token a little likely (forced ones too)."""

    def _row(self, prefix: tuple) -> torch.Tensor:
        return super()._row(prefix).clamp(min=math.log(1e-3))


@pytest.mark.parametrize("phrase, glued, apart", [
    ([B], [G, B, EOS], [G, A, B, EOS]),  # forced right after G; with mid_word only once A ends the word
    ([A], [G, A, EOS], [G, W, A, EOS]),  # the model spells it after G itself: met, but not as a word
    ([A, B], [G, A, B, EOS], [G, W, A, B, EOS]),  # its first piece written after G is not its start
])
def test_a_phrase_starts_where_a_word_starts_when_the_pieces_say_which_continue(phrase, glued, apart):
    """Without mid_word a phrase may follow a piece that continues a word ("Fisch@@ markt"); with it, only a piece
    that ends one, the row finishing its word first; a sentence without mid_word in the same batch is unchanged."""
    mid_word = torch.zeros(16, dtype=torch.bool)
    mid_word[G] = True
    src, lengths = batch([[9], [9]])
    out = search(GlueModel(GLUE), src, lengths, {0: phrases(phrase), 1: phrases(phrase, mid_word=mid_word)},
                 beam=5, nbest=3)
    assert out[0][0].tokens.tolist() == glued and out[1][0].tokens.tolist() == apart
    for h in out[1]:
        tokens = h.tokens.tolist()
        at = holds(tokens, phrase) - len(phrase)
        assert h.unmet == 0 and at >= 0 and (at == 0 or tokens[at - 1] != G)
        assert tokens.count(phrase[0]) == 1  # never "Fisch@@ markt markt"


def test_a_batch_gives_what_one_sentence_at_a_time_gives():
    sentences = SENTENCES + [[7, 7, 8], [10, 4]]
    src, lengths = batch(sentences)
    model = TinyNeuralModel(seed=5)
    constraints = {0: phrases([9, 10], [12]), 1: phrases([4, 5, 6], ordered=True), 3: phrases([11], [13, 14]),
                   5: phrases([15, 15])}
    together = hyps_of(search(model, src, lengths, constraints, beam=3, nbest=2))
    for i, sentence in enumerate(sentences):
        one, n = batch([sentence])
        alone = hyps_of(search(model, one, n, {0: constraints[i]} if i in constraints else {}, beam=3, nbest=2))
        assert [t for t, _ in alone[0]] == [t for t, _ in together[i]], i
        assert [s for _, s in alone[0]] == pytest.approx([s for _, s in together[i]], abs=1e-5)


def test_a_refilled_stream_gives_what_each_batch_alone_gives(copy_model, monkeypatch):
    """Sentences joining running ones merge their phrases, progress and caches (padded to the wider)."""
    src, lengths = copy_batch(12, seed=21)
    g = torch.Generator().manual_seed(5)
    constraints = {i: SentenceConstraints(tuple(torch.randint(4, 24, (int(n),), generator=g)
                                                for n in torch.randint(1, 4, (i % 3,), generator=g)),
                                          ordered=i % 2 == 0) for i in range(12)}
    batches = [(list(range(s, s + 3)), src[s:s + 3], lengths[s:s + 3]) for s in range(0, 12, 3)]
    cfg = GenerationConfig(beam=3, nbest=2, max_len_a=1.5, max_len_b=6, search=CONSTRAINED)
    strategy, ens = build_search(cfg, SPECIALS), EnsembleModel([copy_model])

    def stream() -> dict:
        return {i: [(h.tokens.tolist(), round(h.score, 4), h.unmet) for h in hyps]
                for i, hyps in strategy.search_stream(ens, batches, constraints=constraints)}

    alone = stream()
    merges: list = []
    merge = EnsembleModel.merge
    monkeypatch.setattr(EnsembleModel, "merge", lambda self, *a, **k: (merges.append(1), merge(self, *a, **k))[1])
    monkeypatch.setattr(search_module, "REFILL_AT", 1.0)
    monkeypatch.setattr(type(strategy), "refill", True)
    assert stream() == alone and merges
    assert all(h[2] == 0 for hyps in alone.values() for h in hyps)


def test_through_an_onnx_step_as_through_the_model(copy_model, tmp_path):
    pytest.importorskip("onnxruntime")
    from nmt.engines.onnx_export import export_onnx
    from nmt.engines.onnx_runtime import load_onnx_member

    member = load_onnx_member(export_onnx(copy_model, tmp_path / "onnx"), threads=1)
    src, lengths = copy_batch(6, seed=9)
    constraints = {0: phrases([9, 10]), 2: phrases([4], [20, 21, 22], ordered=True), 5: phrases([17, 5])}
    options = {"beam": 4, "max_len_a": 1.5, "max_len_b": 8}
    by_model = search(copy_model, src, lengths, constraints, **options)
    by_step = search(member, src, lengths, constraints, **options)
    assert [[h.tokens.tolist() for h in s] for s in by_step] == [[h.tokens.tolist() for h in s] for s in by_model]
    assert all(by_step[i][0].unmet == 0 for i in constraints)


def test_attention_and_the_translator_pass_constraints_on(copy_model):
    src, lengths = copy_batch(3, seed=2)
    cfg = GenerationConfig(beam=3, max_len_a=1.5, max_len_b=6, search=CONSTRAINED)
    translator = Translator(EnsembleModel([copy_model]), build_search(cfg, SPECIALS))
    out = translator.translate(src, lengths, need_attn=True, constraints={1: phrases([12, 13])})
    h = out[1][0]
    assert holds(h.tokens.tolist(), [12, 13]) >= 0 and h.unmet == 0
    assert h.attention is not None and h.attention.shape == (len(h.tokens), src.size(1))
    streamed = dict(translator.translate_stream([([0, 1, 2], src, lengths)], constraints={1: phrases([12, 13])}))
    assert streamed[1][0].tokens.tolist() == h.tokens.tolist()


@pytest.mark.parametrize("name", ["beam", "greedy", "sampling"])
def test_strategies_that_cannot_force_terms_refuse_them(name):
    src, lengths = batch([[5, 6]])
    with pytest.raises(UsageError, match=f"--search {name} cannot force terms"):
        search(TinyNeuralModel(), src, lengths, {0: phrases([9])}, name=name, beam=1 if name == "greedy" else 2)
    assert search(TinyNeuralModel(), src, lengths, {0: SentenceConstraints(())}, name=name, beam=2)


def test_ctranslate2_refuses_terms_and_a_phrase_may_not_hold_special_symbols():
    translator = BatchTranslator(lambda src, lengths: [[] for _ in range(src.size(0))], 64)
    src, lengths = batch([[5, 6]])
    with pytest.raises(UsageError, match="--engine ctranslate2 cannot force terms; use --engine torch"):
        translator.translate(src, lengths, constraints={0: phrases([9])})
    with pytest.raises(UsageError, match="--engine ctranslate2 cannot force terms"):
        list(translator.translate_stream([([0], src, lengths)], constraints={0: phrases([9])}))
    with pytest.raises(UsageError, match="sentence 0: a constraint phrase holds a special symbol"):
        search(TinyNeuralModel(), src, lengths, {0: phrases([9, EOS])})
    with pytest.raises(ValueError, match="non-empty"):
        phrases([])
