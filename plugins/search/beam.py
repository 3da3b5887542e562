"""Beam search over a whole batch at once.

Each step scores every (beam, next token) pair of every sentence with one top-k over
(beam x vocabulary), keeps the 2*beam best candidates per sentence, finalises the eos ones
ranked within the first ``beam`` and continues the ``beam`` best others. A sentence with
``beam`` finished hypotheses (or at its length limit) leaves the batch: its rows are dropped
from the encoder output and the key/value cache, so long sentences do not make short ones pay,
and waiting sentences take their places (``Search.search_stream``).

A sentence's first step decodes one row (its beams are still one prefix) and only then copies
the encoder output and cache to ``beam`` rows; the encoder-side cache entries are reordered only
when sentences leave, never when beams are merely re-ranked. Tested to give fairseq-generate's
hypotheses on a converted fairseq model (tests/test_import_fairseq_parity.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional

import torch

from nmt.config.generate import GenerationConfig
from nmt.generation.constraints import ConstraintMap, refuse_constraints
from nmt.generation.ensemble import EnsembleModel
from nmt.generation.search import NEG_INF, Hypothesis, Rows, Search, SentenceQueue, SourceBatch, Specials
from nmt.generation.topk import wide_topk
from nmt.plugins.search.greedy import GreedySearch
from nmt.registry import NoOptions, OptionsT, register_search

LIVE_LONG = 3.0  # a live search keeps apart sentences that ran this many times the median running one's steps
LIVE_LONG_MIN = 16  # ... and at least this many


@dataclass
class Beams(Rows):
    """The sentences being searched: ``k`` consecutive rows each; ``scores`` holds each row's
    cumulative log-prob after every input column."""

    ids: list[int] = field(default_factory=list)  # (n) sentence ids
    n_done: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))  # (n,) finished per sentence
    finished: list[list[Hypothesis]] = field(default_factory=list)  # (n) per sentence

    def successor(self, fields: dict[str, Any], kept: Optional[torch.Tensor], rows: torch.Tensor,
                  new_rows: Optional[dict[str, torch.Tensor]] = None) -> "Beams":
        """The Beams of ``fields`` (Rows's): the sentences ``kept`` (n',) of these (None: every one) in rows made
        from these rows ``rows`` (n'*k,); ``new_rows``: per-row tensors (n'*k, ...) a subclass's choice gave the
        new rows (else a subclass's per-row state follows ``rows``)."""
        if kept is None:
            return Beams(**fields, ids=self.ids, n_done=self.n_done, finished=self.finished)
        kept_list = kept.tolist()
        return Beams(**fields, ids=[self.ids[i] for i in kept_list], n_done=self.n_done[kept],
                     finished=[self.finished[i] for i in kept_list])

    def joined(self, other: "Beams", fields: dict[str, Any]) -> "Beams":
        """The Beams of ``fields`` (Rows.merged_fields): these sentences then ``other``'s."""
        return Beams(**fields, ids=self.ids + other.ids, n_done=torch.cat([self.n_done, other.n_done]),
                     finished=self.finished + other.finished)


class BeamSearchBase(Search[OptionsT]):
    """Beam search over a running batch (the machinery): how a step's candidates become beams is :meth:`_choose`'s,
    which a strategy that chooses its own way (nmt.plugins.search.constrained) overrides, with the Beams it keeps."""

    # Starting waiting sentences in the rows of finished ones (Search.search_stream) is off for
    # beam search, which defers a batch's last sentences instead: every beam step reorders the whole
    # key/value cache, and rows that joined later make it as wide as the oldest sentence (left pads).
    # Measured in turns (benchmarks/RESULTS.md, generate_scheduling), refilling beams ran from somewhat slower
    # to somewhat faster than batch by batch; deferring was clearly faster.
    refill = False

    def __init__(self, cfg: OptionsT, gen: GenerationConfig, specials: Specials, seed: int = 1):
        super().__init__(cfg, gen, specials, seed)
        # One beam is the best token at every step: greedy's path search does that with less bookkeeping.
        self.greedy = GreedySearch(NoOptions(), gen, specials, seed) if gen.beam == 1 else None

    @torch.inference_mode()
    def search_stream(self, ens: EnsembleModel, batches: Iterable[SourceBatch], need_attn: bool = False,
                      constraints: Optional[ConstraintMap] = None) -> Iterator[tuple[int, list[Hypothesis]]]:
        """Batch after batch; without refill, a batch's last few sentences (DEFER_AT of it, usually
        long outputs) are set aside and searched again, all together, after the last batch, so they
        do not decode alone for tens of steps per batch. They get the same hypotheses either way."""
        refuse_constraints(self.name(), constraints)
        if self.greedy is not None:
            yield from self.greedy.search_stream(ens, batches, need_attn)
            return
        yield from self._run(ens, batches, need_attn, None)

    def _run(self, ens: EnsembleModel, batches: Iterable[SourceBatch], need_attn: bool,
             constraints: Optional[ConstraintMap]) -> Iterator[tuple[int, list[Hypothesis]]]:
        """The search of every sentence of ``batches``; ``constraints`` reaches :meth:`_start` (a subclass's)."""
        # a live source (a server's queue) is refilled whatever this strategy prefers: its sentences would
        # otherwise wait for the whole batch to finish
        refill = (self.refill or SentenceQueue.live_capacity(batches) is not None) and ens.can_merge and not need_attn
        queue = SentenceQueue(batches, self.sp.pad, refill=refill)
        live = refill and queue.capacity is not None
        beams: Optional[Beams] = None  # the running sentences
        long: Optional[Beams] = None  # a live source's sentences that outlived the others (_split_long)
        sources: dict[int, torch.Tensor] = {}  # running sentence id -> source tokens, to defer it
        size = 0  # sentences of the batch that started last
        since_start = 0  # steps since sentences last started
        while True:
            if beams is None:
                started = self._take(ens, queue, long, sources, since_start, need_attn, constraints)
                if started is not None:
                    since_start = 0
                    beams, done, size = started
                    yield from self._forget(done, sources)
            if beams is None and long is None:
                if queue.empty():
                    return
                continue
            if beams is not None and not refill and queue.should_defer(len(beams.ids), size):
                queue.defer([(i, sources.pop(i)) for i in beams.ids], size)
                beams = None
                continue
            if live and beams is not None:
                beams, old = self._split_long(ens, beams)
                if old is not None:
                    long = old if long is None else self._merge(ens, long, old)
            since_start += 1
            if beams is not None:
                cand, step_of = self._step(ens, beams, need_attn)
                # Sentences waiting now start (their first step) between the running rows' decoder pass and their
                # choice, and join them in the choice's reorder of the cache: one copy of the running rows instead
                # of two. Their second step is the running rows' next one, as when they joined before this step.
                started = (self._take(ens, queue, long, sources, since_start, need_attn, constraints, beams)
                           if refill else None)
                joining = None
                if started is not None:
                    since_start = 0
                    joining, done, _ = started
                    yield from self._forget(done, sources)
                beams, done = self._choose(ens, beams, cand, self._first_rows(beams), step_of, first=False,
                                           joining=joining)
                yield from self._forget(done, sources)
            if long is not None:
                long, done = self._advance(ens, long, need_attn)
                yield from self._forget(done, sources)

    def _take(self, ens: EnsembleModel, queue: SentenceQueue, long: Optional[Beams], sources: dict[int, torch.Tensor],
              since_start: int, need_attn: bool, constraints: Optional[ConstraintMap], beams: Optional[Beams] = None
              ) -> Optional[tuple[Optional[Beams], list[tuple[int, list[Hypothesis]]], int]]:
        """The sentences ``queue`` starts now, past their first step, while ``beams`` and ``long`` run: (their Beams,
        or None if every one ended at once; those that did; how many started), or None if none starts."""
        running = sum(len(b.ids) for b in (beams, long) if b is not None)
        new = queue.take(running, since_start)
        if new is None:
            return None
        ids, src_tokens, src_lengths = new
        sources.update({i: row[:n] for i, row, n in zip(ids, src_tokens, src_lengths.tolist())})
        started, done = self._start(ens, ids, src_tokens, src_lengths, need_attn, constraints)
        return started, done, len(ids)

    def _merge(self, ens: EnsembleModel, a: Beams, b: Beams,
               merged: Optional[tuple[list[Any], list[Any]]] = None) -> Beams:
        """One Beams holding ``a``'s sentences then ``b``'s (``merged``: their encoder outputs and caches, already
        merged)."""
        return a.joined(b, a.merged_fields(b, ens, self.sp.pad, merged))

    def _split_long(self, ens: EnsembleModel, beams: Beams) -> tuple[Beams, Optional[Beams]]:
        """(the others, the sentences that have run LIVE_LONG times the median running sentence's steps, and
        at least LIVE_LONG_MIN; None if none has). A live search's rows share a cache as wide as the
        oldest row, and at beam 5 a few sentences run to the length limit (they never collect ``beam``
        finished hypotheses): kept apart, they do not make every sentence that joins later pay for their
        width."""
        if beams.window.size(1) - 1 <= LIVE_LONG_MIN:  # no row has run that long
            return beams, None
        steps = beams.steps()[:: self.gen.beam]  # (n,) tokens each sentence generated so far
        old = steps > max(LIVE_LONG_MIN, LIVE_LONG * float(steps.float().median()))  # (n,)
        if not bool(old.any()) or bool(old.all()):
            return beams, None
        young, old = torch.nonzero(~old).squeeze(1), torch.nonzero(old).squeeze(1)
        return self._select(ens, beams, young), self._select(ens, beams, old)

    def _select(self, ens: EnsembleModel, beams: Beams, sentences: torch.Tensor) -> Beams:
        """The Beams of ``sentences`` (n',) alone, without the leading columns none of them owns."""
        rows = self._rows_of(sentences)  # (n'*k,)
        enc_rows = sentences if ens.can_share_encoder else rows
        drop = int(beams.pads[rows].min())
        states = ens.reorder_states(beams.states, rows, encoder_order=enc_rows, drop_left=drop)  # beams: unchanged
        fields = beams.selected_fields(rows, drop, ens.reorder_encoder(beams.encs, enc_rows), states)
        return beams.successor(fields, sentences, rows)

    def _rows_of(self, sentences: torch.Tensor) -> torch.Tensor:
        """The beam rows (n'*k,) of ``sentences`` (n',), each sentence's k rows being consecutive."""
        k = self.gen.beam
        return (sentences.unsqueeze(1) * k + torch.arange(k)).view(-1)

    @staticmethod
    def _forget(done: list[tuple[int, list[Hypothesis]]],
                sources: dict[int, torch.Tensor]) -> Iterator[tuple[int, list[Hypothesis]]]:
        for i, hyps in done:
            sources.pop(i, None)
            yield i, hyps

    def _start(self, ens: EnsembleModel, ids: list[int], src_tokens: torch.Tensor, src_lengths: torch.Tensor,
               need_attn: bool, constraints: Optional[ConstraintMap] = None
               ) -> tuple[Optional[Beams], list[tuple[int, list[Hypothesis]]]]:
        """The first step of new sentences, one row each; then each becomes its k beams (``constraints``: for a
        subclass that forces terms)."""
        sp, n = self.sp, len(ids)
        max_lens = self.max_lengths(ens, src_lengths)  # (n,)
        encs, states = ens.encode(src_tokens, src_lengths), ens.new_states()
        window = torch.full((n, 1), sp.bos, dtype=torch.long)
        lprobs, step_attn = ens.step(window, encs, states, need_attn)  # (n, V)
        beams = self._opened(Beams(encs, states, window, torch.zeros(n, 1), torch.zeros(n, dtype=torch.long),
                                   max_lens, torch.zeros(n, 0, src_tokens.size(1)) if need_attn else None,
                                   ids=list(ids), n_done=torch.zeros(n, dtype=torch.long),
                                   finished=[[] for _ in range(n)]), constraints)
        self._rules(lprobs, beams, 0)
        beams.add_attention(step_attn)
        return self._choose(ens, beams, lprobs, torch.arange(n).unsqueeze(1), torch.zeros(n, dtype=torch.long),
                            first=True)

    def _advance(self, ens: EnsembleModel, beams: Beams,
                 need_attn: bool) -> tuple[Optional[Beams], list[tuple[int, list[Hypothesis]]]]:
        """One step of every running row."""
        cand, step_of = self._step(ens, beams, need_attn)
        return self._choose(ens, beams, cand, self._first_rows(beams), step_of, first=False)

    def _step(self, ens: EnsembleModel, beams: Beams, need_attn: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The decoder pass of every running row: each sentence's candidate scores (n, k*V) and the tokens each
        row (N,) had generated before it."""
        lprobs, step_attn = ens.step(beams.window, beams.encs, beams.states, need_attn)  # (N, V)
        step_of = beams.steps()  # (N,) tokens each row generated before this one
        self._rules(lprobs, beams, step_of)
        beams.add_attention(step_attn)
        return lprobs.add_(beams.scores[:, -1:]).view(len(beams.ids), -1), step_of  # (n, k*V), in place

    def _opened(self, beams: Beams, constraints: Optional[ConstraintMap]) -> Beams:
        """The Beams of sentences just started (one row each, before their first choice): these; a subclass adds
        what it keeps about them (``constraints``)."""
        return beams

    def _rules(self, lprobs: torch.Tensor, beams: Beams, step: int | torch.Tensor) -> None:
        """Adjust the next-token log-probs (N, V) of ``beams``'s rows in place (Search.apply_rules; ``step``: tokens
        generated so far)."""
        self.apply_rules(lprobs, step, beams.window[:, 1:], beams.row_max)

    def _first_rows(self, beams: Beams) -> torch.Tensor:
        """(n, 1) each sentence's first row."""
        return torch.arange(len(beams.ids)).unsqueeze(1) * self.gen.beam

    def _choose(self, ens: EnsembleModel, beams: Beams, cand: torch.Tensor, first_row: torch.Tensor,
                step_of: torch.Tensor, first: bool, joining: Optional[Beams] = None
                ) -> tuple[Optional[Beams], list[tuple[int, list[Hypothesis]]]]:
        """From the candidate scores ``cand`` (n, width*V) of each sentence (its rows from
        ``first_row`` (n, 1) on; ``step_of`` (N,) tokens each row generated so far), finalise the eos
        ones and keep the k best others as new beams; ``joining``'s sentences follow them. Reordering the
        cache copies every row, so ``joining`` is merged in that same copy (a merge of its own would copy
        every running row again)."""
        sp, k = self.sp, self.gen.beam
        n, vocab = cand.size(0), cand.size(1) if first else cand.size(1) // k
        width = min(2 * k, cand.size(1))
        cand_scores, cand_idx = wide_topk(cand, width)  # (n, 2k), as cand.topk(width, dim=1)
        cand_beams = torch.div(cand_idx, vocab, rounding_mode="floor")  # (n, 2k)
        cand_tokens = cand_idx % vocab  # (n, 2k)
        cand_rows = first_row + cand_beams  # (n, 2k) row of the parent

        is_eos = cand_tokens == sp.eos  # (n, 2k)
        eos_top = is_eos[:, :k] & torch.isfinite(cand_scores[:, :k])  # (n, k) finalisable
        room = (k - beams.n_done).unsqueeze(1)  # (n, 1)
        take = eos_top & (eos_top.cumsum(1) <= room)  # (n, k)
        if bool(take.any()):
            self._finalise(beams, take, cand_rows, cand_scores, step_of)
            beams.n_done += take.sum(1)
        sent_steps = step_of[first_row.squeeze(1)]  # (n,)
        done = (beams.n_done >= k) | (beams.row_max[first_row.squeeze(1)] <= sent_steps)  # (n,)
        leaving = torch.nonzero(done).squeeze(1).tolist()
        results = [(beams.ids[i], self._best(beams.finished[i])) for i in leaving]
        if len(leaving) == n:
            return joining, results

        # The beam best non-eos candidates continue (at most k of the 2k are eos).
        live_scores = cand_scores.masked_fill(is_eos, NEG_INF)  # (n, 2k)
        sel_scores, sel_pos = live_scores.topk(min(k, width), dim=1)  # (n, k)
        if sel_pos.size(1) < k:  # tiny vocabulary: pad with dead beams
            fill = k - sel_pos.size(1)
            sel_pos = torch.cat([sel_pos, sel_pos[:, :1].expand(n, fill)], 1)
            sel_scores = torch.cat([sel_scores, torch.full((n, fill), NEG_INF)], 1)
        rows, tokens, scores = cand_rows.gather(1, sel_pos), cand_tokens.gather(1, sel_pos), sel_scores  # (n, k)
        return self._keep(ens, beams, done, bool(leaving), rows, tokens, scores, first, joining), results

    def _keep(self, ens: EnsembleModel, beams: Beams, done: torch.Tensor, leaving: bool, rows: torch.Tensor,
              tokens: torch.Tensor, scores: torch.Tensor, first: bool, joining: Optional[Beams],
              new_rows: Optional[dict[str, torch.Tensor]] = None) -> Beams:
        """The Beams after this step: the sentences not ``done`` (n,) (``leaving``: some are), each continuing
        with its k chosen candidates, their parent ``rows`` (n, k), ``tokens`` and cumulative ``scores``; then
        ``joining``'s sentences. ``new_rows``: per-row tensors (n, k, ...) of a subclass's choice, handed to
        Beams.successor as (n'*k, ...)."""
        kept: Optional[torch.Tensor] = None
        if leaving:  # (most steps have none: they skip these masks and copies)
            keep = ~done  # (n,)
            kept = torch.nonzero(keep).squeeze(1)  # (n',)
            rows, tokens, scores = rows[keep], tokens[keep], scores[keep]  # (n', k)
            new_rows = {name: t[keep] for name, t in new_rows.items()} if new_rows is not None else None
        rows = rows.view(-1)  # (n'*k,) parents of the new beams
        drop = int(beams.pads[rows].min()) if leaving else 0  # columns no remaining row owns
        share = ens.can_share_encoder  # encoder-side rows: one per sentence, or one per beam
        if first:  # one row per sentence so far: each becomes its k beams
            states = ens.reorder_states(beams.states, rows, keep_encoder=share)
            encs = beams.encs if share else ens.reorder_encoder(beams.encs, rows)
        else:  # beams re-ranked within their sentences; when sentences left, the encoder side loses their rows
            enc_rows = None if kept is None else kept if share else self._rows_of(kept)
            encs = beams.encs if enc_rows is None else ens.reorder_encoder(beams.encs, enc_rows)
            if joining is None:
                states = ens.reorder_states(beams.states, rows, encoder_order=enc_rows, keep_encoder=enc_rows is None,
                                            drop_left=drop)
            else:
                merged = ens.merge(encs, beams.states, joining.encs, joining.states, order=rows,
                                   encoder_order=enc_rows, drop_left=drop)
                states = []  # the kept rows' own cache is never built: ``merged`` holds it
        fields = beams.extended_fields(rows, tokens.view(-1), scores.view(-1), drop, encs, states)
        flat = {name: t.flatten(0, 1) for name, t in new_rows.items()} if new_rows is not None else None
        kept_beams = beams.successor(fields, kept, rows, flat)
        return kept_beams if joining is None else self._merge(ens, kept_beams, joining, merged)

    def _best(self, hyps: list[Hypothesis]) -> list[Hypothesis]:
        return sorted(hyps, key=lambda x: -x.score)[: self.gen.nbest]

    def _finalise(self, beams: Beams, take: torch.Tensor, cand_rows: torch.Tensor, cand_scores: torch.Tensor,
                  step_of: torch.Tensor, cand_unmet: Optional[torch.Tensor] = None) -> None:
        """Store the eos candidates marked in ``take`` (n, w) as finished hypotheses (``cand_unmet`` (n, w): the
        constraint phrases each lacks, when the search forces some)."""
        pos = take.nonzero()  # (F, 2) (sentence, candidate rank)
        rows = cand_rows[pos[:, 0], pos[:, 1]].tolist()  # (F,)
        totals = cand_scores[pos[:, 0], pos[:, 1]]  # (F,)
        unmet = cand_unmet[pos[:, 0], pos[:, 1]].tolist() if cand_unmet is not None else [0] * len(rows)  # (F,)
        width = beams.window.size(1)
        for f, (sentence, row) in enumerate(zip(pos[:, 0].tolist(), rows)):
            s = int(step_of[row])  # tokens before the eos
            seq = torch.cat([beams.window[row, width - s:], beams.window.new_tensor([self.sp.eos])])  # (s+1,)
            running = torch.cat([beams.scores[row, width - s - 1:], totals[f:f + 1]])  # (s+2,) from bos on
            positional = running[1:] - running[:-1]  # (s+1,)
            a = beams.attn[row, width - s - 1:].clone() if beams.attn is not None else None  # (s+1, S)
            score = float(self.normalise(totals[f:f + 1], s + 1))
            beams.finished[sentence].append(Hypothesis(seq, score, positional, a, unmet[f]))


@register_search("beam")
class BeamSearch(BeamSearchBase[NoOptions]):
    """Beam search with fairseq's length penalty (--beam, --lenpen, --nbest); --beam 1 is greedy."""
