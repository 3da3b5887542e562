"""The base of every search strategy: what a hypothesis is, and the rules on next-token
log-probabilities that all strategies share (length limits, penalties, n-gram blocking).

A strategy is a plugin registered with ``nmt.registry.register_search``; it implements
:meth:`Search.search`. Use :func:`build_search` to get the one a config asks for.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Generic, Iterable, Iterator, Optional

import torch

from nmt.config.generate import GenerationConfig
from nmt.data.dictionary import Dictionary
from nmt.errors import ConfigError
from nmt.generation.constraints import ConstraintMap, refuse_constraints
from nmt.generation.ensemble import EnsembleModel
from nmt.registry import SEARCH, OptionsT

NEG_INF = float("-inf")
REFILL_AT = 0.5  # refill the running batch when fewer than this share of its sentences are left
LIVE_JOIN_EVERY = 2  # a live source's waiting sentences join the running ones at most every this many steps
DEFER_AT = 1 / 16  # strategies that do not refill: set aside a batch's last sentences at this share

SourceBatch = tuple[list[int], torch.Tensor, torch.Tensor]  # sentence ids, src_tokens (B, S), src_lengths (B,)


@dataclass
class Hypothesis:
    """One output of a search for one sentence."""

    tokens: torch.Tensor  # (T,) generated ids, ending with eos, no leading bos
    score: float  # sum of log-probs / len^lenpen
    positional_scores: torch.Tensor  # (T,) log-prob of each token
    attention: torch.Tensor | None = None  # (T, S) cross-attention of each step, when asked for
    unmet: int = 0  # the sentence's constraint phrases this output lacks (nmt.generation.constraints); 0: all met


@dataclass(frozen=True)
class Specials:
    """The dictionary indices a search needs."""

    bos: int
    eos: int
    pad: int
    unk: int

    @staticmethod
    def of(dictionary: Dictionary, decoder_start: int | None = None) -> "Specials":
        """``decoder_start``: the first decoder input when not bos (fairseq-trained models use eos)."""
        bos = dictionary.bos() if decoder_start is None else decoder_start
        return Specials(bos, dictionary.eos(), dictionary.pad(), dictionary.unk())


class Search(Generic[OptionsT]):
    """A search strategy, constructed as ``cls(cfg, gen, specials, seed)``: ``cfg`` holds the strategy's
    own options (its registered config dataclass, the type argument: ``Search[SamplingConfig]``), ``gen``
    the options every strategy reads (beam size, length limits, penalties), ``specials`` the dictionary's
    special indices."""

    def __init__(self, cfg: OptionsT, gen: GenerationConfig, specials: Specials, seed: int = 1):
        if not 1 <= gen.nbest <= gen.beam:
            raise ConfigError(f"--nbest {gen.nbest}: must be between 1 and --beam ({gen.beam})")
        self.cfg = cfg
        self.gen = gen
        self.sp = specials
        self.seed = seed

    def search(self, ens: EnsembleModel, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
               need_attn: bool = False, constraints: Optional[ConstraintMap] = None) -> list[list[Hypothesis]]:
        """For each of the B sentences of ``src_tokens`` (B, S), its ``nbest`` hypotheses, best first.
        ``constraints``: target phrases per row index (0..B-1) that a strategy able to force terms puts in the
        outputs (the others refuse them). A strategy implements this or :meth:`search_stream` (then this one runs
        the batch through it)."""
        if type(self).search_stream is Search.search_stream:
            raise NotImplementedError(f"{type(self).__name__} implements neither search nor search_stream")
        batch = [(list(range(src_tokens.size(0))), src_tokens, src_lengths)]
        found = dict(self.search_stream(ens, batch, need_attn, **given(constraints)))
        return [found[i] for i in range(src_tokens.size(0))]

    def search_stream(self, ens: EnsembleModel, batches: Iterable[SourceBatch], need_attn: bool = False,
                      constraints: Optional[ConstraintMap] = None) -> Iterator[tuple[int, list[Hypothesis]]]:
        """(sentence id, its ``nbest`` hypotheses) for every sentence of ``batches``, as each finishes.
        ``constraints``: target phrases per sentence id, read when a sentence starts (a live source may add
        entries before it gives their sentences); a strategy that cannot force terms refuses a map that asks any
        (nmt.generation.constraints.refuse_constraints).

        This default searches one batch after the other. The built-in strategies instead keep a
        batch's worth of sentences running and start waiting ones as others finish (when the
        models' caches can be merged, ``EnsembleModel.can_merge``), so a few long outputs do not
        leave the machine decoding almost empty batches."""
        if type(self).search is Search.search:
            raise NotImplementedError(f"{type(self).__name__} implements neither search nor search_stream")
        takes = "constraints" in inspect.signature(self.search).parameters  # a strategy written before they were
        if not takes:
            refuse_constraints(self.name(), constraints)
        for ids, src_tokens, src_lengths in batches:
            own = None if constraints is None else {k: constraints[i] for k, i in enumerate(ids) if i in constraints}
            if not takes:
                refuse_constraints(self.name(), own)  # a live source's map may have grown
            yield from zip(ids, self.search(ens, src_tokens, src_lengths, need_attn,
                                            **(given(own) if takes else {})))

    def name(self) -> str:
        """The --search name the user chose (what a message about this strategy calls it)."""
        return str(self.gen.search.get("name", type(self).__name__))

    # --- shared rules -------------------------------------------------------------------------

    def max_lengths(self, ens: EnsembleModel, src_lengths: torch.Tensor) -> torch.Tensor:
        """Per sentence, the most tokens it may generate before its eos: (B,) long."""
        return length_limits(self.gen, ens.max_target_positions(), src_lengths)

    def apply_rules(self, lprobs: torch.Tensor, step: int | torch.Tensor, generated: torch.Tensor,
                    max_lens: torch.Tensor) -> torch.Tensor:
        """Adjust next-token log-probs (N, V) in place at ``step`` (tokens generated so far: one
        number, or one per row (N,) when rows started at different times).

        ``generated`` (N, t) are those tokens, right-aligned (a row with fewer has bos and pads
        first); ``max_lens`` (N,) each row's length limit. bos/pad are never produced; eos is
        banned before --min-len and forced at the limit."""
        sp = self.sp
        lprobs[:, sp.pad] = NEG_INF
        if sp.bos != sp.eos:
            lprobs[:, sp.bos] = NEG_INF
        if self.gen.unkpen:
            lprobs[:, sp.unk] -= self.gen.unkpen
        if isinstance(step, int):
            if step < self.gen.min_len:
                lprobs[:, sp.eos] = NEG_INF
        elif self.gen.min_len > 0:
            lprobs[:, sp.eos].masked_fill_(step < self.gen.min_len, NEG_INF)
        n = self.gen.no_repeat_ngram_size
        if n > 0:
            eligible = (step >= n) if isinstance(step, torch.Tensor) else None  # (N,) or None
            if eligible is None:
                if step >= n:
                    block_repeated_ngrams(lprobs, generated, n)
            elif bool(eligible.all()):
                block_repeated_ngrams(lprobs, generated, n)
            elif bool(eligible.any()):
                rows = lprobs[eligible]  # (N', V) a copy
                block_repeated_ngrams(rows, generated[eligible], n)
                lprobs[eligible] = rows
        at_limit = max_lens <= step  # (N,)
        if bool(at_limit.any()):
            eos_lp = lprobs[:, sp.eos].clone()  # (N,)
            eos_lp = torch.where(torch.isfinite(eos_lp), eos_lp, torch.zeros_like(eos_lp))
            lprobs[at_limit] = NEG_INF
            lprobs[at_limit, sp.eos] = eos_lp[at_limit]
        return lprobs

    def normalise(self, total: torch.Tensor, length: torch.Tensor | int) -> torch.Tensor:
        """fairseq's length penalty: score / len^lenpen (len counts the eos)."""
        if isinstance(length, int):
            return total / (length ** self.gen.lenpen)
        return total / length.double().pow(self.gen.lenpen).to(total.dtype)


@dataclass
class Rows:
    """The decoder rows a search is running, with their decoder inputs kept right-aligned: a row
    that joined later has its bos after ``pads`` pad columns (nmt.models.decoder_cache)."""

    encs: list[Any]
    states: list[Any]  # each member's cache (EnsembleModel.new_states: a DecoderCache)
    window: torch.Tensor  # (N, L+1) decoder inputs so far, bos first
    scores: torch.Tensor  # (N, L+1) a score per input column (0 at bos and before); the strategy says which
    pads: torch.Tensor  # (N,) leading columns that are not the row's own
    row_max: torch.Tensor  # (N,) most tokens the row may generate
    attn: Optional[torch.Tensor]  # (N, L+1, S) cross-attention of each step, when asked for

    def steps(self) -> torch.Tensor:
        """(N,) tokens each row has generated."""
        return self.window.size(1) - 1 - self.pads

    def merged_fields(self, other: "Rows", ens: EnsembleModel, pad: int,
                      merged: Optional[tuple[list[Any], list[Any]]] = None) -> dict[str, Any]:
        """The fields of one Rows holding these rows then ``other``'s (no attention kept); ``merged``: the
        encoder outputs and caches of both, when the caller has merged them already (EnsembleModel.merge)."""
        width = max(self.window.size(1), other.window.size(1))

        def left(x: torch.Tensor, value: float) -> torch.Tensor:
            return torch.nn.functional.pad(x, (width - x.size(1), 0), value=value)

        encs, states = merged or ens.merge(self.encs, self.states, other.encs, other.states)
        return dict(encs=encs, states=states,
                    window=torch.cat([left(self.window, pad), left(other.window, pad)]),
                    scores=torch.cat([left(self.scores, 0.0), left(other.scores, 0.0)]),
                    pads=torch.cat([self.pads + width - self.window.size(1),
                                    other.pads + width - other.window.size(1)]),
                    row_max=torch.cat([self.row_max, other.row_max]), attn=None)

    def selected_fields(self, rows: torch.Tensor, drop: int, encs: list[Any], states: list[Any]) -> dict[str, Any]:
        """The fields of ``rows`` (N',) alone; the ``drop`` leading columns none of them owns are forgotten."""
        return dict(encs=encs, states=states, window=self.window[rows, drop:], scores=self.scores[rows, drop:],
                    pads=self.pads[rows] - drop, row_max=self.row_max[rows],
                    attn=self.attn[rows, drop:] if self.attn is not None else None)

    def extended_fields(self, rows: Optional[torch.Tensor], tokens: torch.Tensor, scores: torch.Tensor, drop: int,
                        encs: list[Any], states: list[Any]) -> dict[str, Any]:
        """The fields after keeping ``rows`` (parents; None: every row, in place) and appending their
        next ``tokens`` (N',) and ``scores`` (N',); the ``drop`` leading columns no kept row owns are
        forgotten."""
        fields: dict[str, Any] = (dict(encs=encs, states=states, window=self.window, scores=self.scores, pads=self.pads,
                                       row_max=self.row_max, attn=self.attn) if rows is None
                                  else self.selected_fields(rows, drop, encs, states))
        fields["window"] = torch.cat([fields["window"], tokens.unsqueeze(1)], 1)
        fields["scores"] = torch.cat([fields["scores"], scores.unsqueeze(1)], 1)
        return fields

    def add_attention(self, step_attn: Optional[torch.Tensor]) -> None:
        """Record this step's cross-attention (N, S) when attention is kept."""
        if self.attn is not None:
            a = step_attn if step_attn is not None else self.attn.new_zeros(self.attn.size(0), self.attn.size(2))
            self.attn = torch.cat([self.attn, a.unsqueeze(1).to(self.attn.dtype)], 1)


class SentenceQueue:
    """Sentences waiting to be searched, in the order of the batches they come in.

    ``take(running)`` says which to start now: a whole batch's worth when nothing runs; with
    ``refill``, also enough to fill the batch back up once fewer than REFILL_AT of it still
    runs (a live source, whose sentences trickle in: see ``_live_start``). A batch's worth is the
    size of the batch the next sentence came in (with --max-tokens it shrinks as sentences get
    longer). Sentences given to ``defer`` come back, together, once
    every batch has been taken."""

    def __init__(self, batches: Iterable[SourceBatch], pad: int, refill: bool):
        self._batches = iter(batches)
        self._waiting: list[tuple[int, torch.Tensor, int]] = []  # (id, unpadded tokens, batch size)
        self._deferred: list[tuple[int, torch.Tensor, int]] = []
        self.pad = pad
        self.refill = refill
        self.capacity: int | None = self.live_capacity(batches)

    @staticmethod
    def live_capacity(batches: Iterable[SourceBatch]) -> int | None:
        """How many sentences may run at once when ``batches`` is a live source (None: it is not).

        A live source (nmt-serve's queue) gets new sentences while the search runs: its ``next`` returns
        what is waiting now and raises StopIteration when nothing is, yet may give more on a later call.
        It declares a ``capacity``; waiting sentences then start as soon as fewer than that run, since
        otherwise they would wait for every running sentence to finish."""
        capacity = getattr(batches, "capacity", None)
        return int(capacity) if capacity else None

    def _fetch_batch(self) -> bool:
        batch = next(self._batches, None)
        if batch is None:
            return False
        ids, src_tokens, src_lengths = batch
        size = self.capacity or len(ids)
        for i, row, n in zip(ids, src_tokens, src_lengths.tolist()):
            self._waiting.append((int(i), row[:n], size))
        return True

    def _fetch(self) -> bool:
        """Add the next batch's sentences to those waiting, or else the deferred ones; False: none left."""
        if self._fetch_batch():
            return True
        added, self._deferred = self._deferred, []
        self._waiting.extend(added)
        return bool(added)

    def take(self, running: int, since_start: int = 0) -> Optional[SourceBatch]:
        """The sentences to start while ``running`` sentences are being searched (None: none now);
        ``since_start``: steps searched since sentences last started (live sources)."""
        if not self._waiting and not self._fetch():
            return None
        size = self._waiting[0][2]
        if self.capacity:
            if not self._live_start(running, since_start):
                return None
        elif running and not (self.refill and running < REFILL_AT * size):
            return None
        room = size - running
        while len(self._waiting) < room and self._fetch():
            pass
        chosen, self._waiting = self._waiting[:room], self._waiting[room:]
        lengths = torch.tensor([len(t) for _, t, _ in chosen])
        tokens = torch.full((len(chosen), int(lengths.max())), self.pad, dtype=torch.long)
        for r, (_, t, _) in enumerate(chosen):
            tokens[r, : len(t)] = t
        return [i for i, _, _ in chosen], tokens, lengths

    def _live_start(self, running: int, since_start: int) -> bool:
        """Whether a live source's waiting sentences start now: when nothing runs; or, with room, once the
        running ones have taken LIVE_JOIN_EVERY steps since sentences last started. Starting costs an
        encoder pass, a first decoder step and a copy of every running row's cache, so sentences that
        trickle in start a few at a time rather than one per step."""
        assert self.capacity is not None
        while len(self._waiting) < self.capacity and self._fetch():
            pass
        if not running:
            return True
        return running < self.capacity and self.refill and since_start >= LIVE_JOIN_EVERY

    def should_defer(self, running: int, size: int) -> bool:
        """Whether to set aside the ``running`` last sentences of a batch of ``size``: few are left
        and other batches wait (never the deferred ones themselves: they run to the end)."""
        return running <= DEFER_AT * size and (bool(self._waiting) or self._fetch_batch())

    def defer(self, sentences: list[tuple[int, torch.Tensor]], size: int) -> None:
        """Search these (id, unpadded tokens) again from the start, after every batch."""
        self._deferred.extend((i, t, size) for i, t in sentences)

    def empty(self) -> bool:
        return not self._waiting and not self._fetch()


def given(constraints: Optional[ConstraintMap]) -> dict[str, ConstraintMap]:
    """The ``constraints=`` keyword to pass on, only when there is a map: strategies written before the keyword
    existed keep working when none is given."""
    return {} if constraints is None else {"constraints": constraints}


def length_limits(gen: GenerationConfig, max_target_positions: int, src_lengths: torch.Tensor) -> torch.Tensor:
    """Per sentence, the most tokens ``gen`` lets it generate before its eos (--max-len-a/-b, --min-len, the
    model's ``max_target_positions``): (B,) long. Every engine's search keeps to these."""
    cap = max_target_positions - 1  # the eos needs a position too
    # Capped before any cast: a --max-len-a/-b beyond int64 would wrap around (or not convert).
    limit = gen.max_len_a * src_lengths.double() + float(min(gen.max_len_b, cap))  # (B,)
    return limit.floor().clamp(max=cap).long().clamp(min=min(max(gen.min_len, 1), cap))


def block_repeated_ngrams(lprobs: torch.Tensor, generated: torch.Tensor, n: int) -> None:
    """Ban (set to -inf in ``lprobs`` (N, V)) every token that would complete an n-gram already
    present in ``generated`` (N, t). Vectorised: all rows and all earlier n-grams at once."""
    t = generated.size(1)
    if t < n:
        return
    windows = generated.unfold(1, n, 1)  # (N, t-n+1, n)
    tail = generated[:, t - n + 1:]  # (N, n-1) the prefix the next token would extend
    match = (windows[:, :, :-1] == tail.unsqueeze(1)).all(-1)  # (N, t-n+1)
    banned = torch.zeros_like(lprobs, dtype=torch.int32)  # (N, V)
    banned.scatter_add_(1, windows[:, :, -1], match.to(torch.int32))
    lprobs.masked_fill_(banned > 0, NEG_INF)


def build_search(gen: GenerationConfig, dictionary: Dictionary, seed: int = 1,
                 decoder_start: int | None = None) -> Search[Any]:
    """The strategy ``gen.search`` names, with its options."""
    return SEARCH.build(gen.search["name"], gen.search, gen, Specials.of(dictionary, decoder_start), seed)
