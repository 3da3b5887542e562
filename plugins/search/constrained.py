"""Lexically constrained beam search: every output holds given target phrases (terminology), in any order or in
the order given, chosen by dynamic beam allocation over the whole batch at once.

Candidates. Each step, a sentence's candidates are beam search's 2k best (beam x vocabulary), each row's own best
token, and its *constraint candidates*, one per phrase: the next token of the phrase a row is committed to, or, for
a free row, the token that starts a phrase it may meet next and whose rest still fits before the length limit
(after the longest beginning of the phrase the row's output already ends with, mostly none). When the target BPE
says which pieces a word goes on after (SentenceConstraints.mid_word: subword-nmt's "Fisch@@"), a phrase starts only
where a word starts: a free row after such a piece finishes its word first (its other candidates are kept), and a
phrase its own tokens spell after one ("Fisch@@ markt") neither counts nor is written again at once.

Banks and allocation. A candidate's *bank* is the number of phrase tokens its output holds (met phrases and the
committed one's progress). The k beams are dealt bank by bank (Post & Vilar 2018; Hu et al. 2019): the best
candidate of each bank, highest bank first, then the second best of each, ...; so outputs that hold more of the
phrases survive next to the most probable ones, and rows that meet everything go on as beam search's own. Every
rule is a few tensor operations over all candidates of all sentences (nmt.generation.constraint_state); a batch
without phrases takes beam search's own choice.

No output degenerates to meet a phrase. In DBA as first written, a row that starts a phrase and leaves it keeps or
restarts its progress, and the banks then favour rows that repeat the phrase's first pieces until the model lets
the rest follow ("BergBergBerg...landschaft"). Here:

- a row starts a phrase only as a forced candidate, and is then *committed*: its one candidate is the phrase's
  next token until the phrase is complete, so a phrase's pieces come once, whole, or not at all; a free row whose
  own tokens spell a phrase meets it as well (no second copy is forced), and phrases never overlap;
- a row that waits to meet a phrase (its eos is banned) may not go on where it would have ended (eos its best
  token: only a constraint candidate may follow), nor repeat a piece of that phrase among its last tokens;
- forced tokens take the model off its usual paths, where loops score well under the length penalty: a row of a
  sentence with phrases does not repeat its last token or a NO_REPEAT-gram (a phrase's own tokens are exempt);
- rows holding the same tokens and progress (a free row and a committed one that agree) are kept once.

Finishing. An eos is allowed to a row only when it cannot complete one more phrase in the tokens it may still
generate (always at the length limit). A sentence is done when k of its finished hypotheses lack no more phrases
than its best running row can still end up lacking, or at its length limit; its outputs are ranked by phrases
lacked (``Hypothesis.unmet``), then score. A phrase that cannot fit before the length limit (after the earlier
ones) is never forced: it is reported unmet, and the output is the best one without it. A sentence with no phrases
gets beam search's hypotheses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Iterator, Optional

import torch
import torch.nn.functional as F

from nmt.generation import constraint_state as cs
from nmt.generation.constraint_state import PhraseTable, Progress
from nmt.generation.constraints import ConstraintMap
from nmt.generation.ensemble import EnsembleModel
from nmt.generation.search import NEG_INF, Hypothesis, SourceBatch
from nmt.generation.topk import wide_topk
from nmt.plugins.search.beam import Beams, BeamSearchBase
from nmt.registry import register_search

LAST = 1 << 40  # a sort key after every real one
SPAN = 1 << 32  # more than any token id: (row label, token) pairs as one number
# A row of a sentence with phrases may not repeat an n-gram of this size (nor its last token): forced tokens take
# the model off its usual paths, where loops score well under the length penalty
NO_REPEAT = 3
# A row waiting to meet a phrase does not go on where the model ends it with more than even odds (log-prob of eos
# above this): past its end it would write what the source does not say; a phrase may follow there, nothing else
ENDED = math.log(0.5)


def repeated_ngram_ends(generated: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, tokens): the tokens that would repeat an n-gram of ``generated`` (R, t), t >= n, in each row (a row may
    appear several times): Search's block_repeated_ngrams without its (R, V) table."""
    windows = generated.unfold(1, n, 1)  # (R, t-n+1, n)
    tail = generated[:, generated.size(1) - n + 1:]  # (R, n-1)
    match = (windows[:, :, :-1] == tail.unsqueeze(1)).all(2)  # (R, t-n+1)
    row, at = torch.nonzero(match, as_tuple=True)
    return row, windows[row, at, -1]


@dataclass
class ConstrainedOptions:
    """The constrained search's options: none yet (whether a sentence's phrases are ordered comes with them,
    nmt.generation.constraints.SentenceConstraints)."""


def _empty_table() -> PhraseTable:
    return PhraseTable.of([], None, torch.zeros(0, dtype=torch.long), ())


@dataclass
class ConstrainedBeams(Beams):
    """Beams, with each sentence's phrases and each row's progress through them."""

    table: PhraseTable = field(default_factory=_empty_table)  # per sentence (n)
    progress: Progress = field(default_factory=lambda: Progress.start(0, 1))  # per row (N)
    tally: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 2, dtype=torch.long))  # (n, C+1) finished
    # hypotheses per number of phrases they lack
    # this step's constraint candidates of each row (N, C): tokens, log-probs before the free tokens' bans, positions
    # in their phrases (ConstrainedSearch._rules reads them, _choose takes them)
    pending: Optional[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None

    @staticmethod
    def of(beams: Beams, table: PhraseTable, progress: Progress, tally: torch.Tensor) -> "ConstrainedBeams":
        """``beams`` with these phrases, progress and tally."""
        own = {f.name: getattr(beams, f.name) for f in fields(Beams)}
        return ConstrainedBeams(**own, table=table, progress=progress, tally=tally)

    def successor(self, fields: dict[str, Any], kept: Optional[torch.Tensor], rows: torch.Tensor,
                  new_rows: Optional[dict[str, torch.Tensor]] = None) -> "ConstrainedBeams":
        progress = Progress.of_dict(new_rows) if new_rows is not None else self.progress.rows(rows)
        table, tally = (self.table, self.tally) if kept is None else (self.table.select(kept), self.tally[kept])
        return self.of(super().successor(fields, kept, rows), table, progress, tally)

    def joined(self, other: Beams, fields: dict[str, Any]) -> "ConstrainedBeams":
        assert isinstance(other, ConstrainedBeams)
        width = max(self.tally.size(1), other.tally.size(1))
        tally = torch.cat([F.pad(t, (0, width - t.size(1))) for t in (self.tally, other.tally)])
        return self.of(super().joined(other, fields), self.table.joined(other.table),
                       self.progress.joined(other.progress), tally)


@register_search("constrained")
class ConstrainedSearch(BeamSearchBase[ConstrainedOptions]):
    """Beam search that forces target phrases into its outputs (--constraints, --glossary).

    Dynamic beam allocation over the whole batch, with committed phrases: never a piece repeated to reach one."""

    @torch.inference_mode()
    def search_stream(self, ens: EnsembleModel, batches: Iterable[SourceBatch], need_attn: bool = False,
                      constraints: Optional[ConstraintMap] = None) -> Iterator[tuple[int, list[Hypothesis]]]:
        """As beam search, forcing into each sentence's outputs the phrases ``constraints`` gives its id (read
        when the sentence starts). Without a map, beam search itself."""
        if constraints is None:
            yield from super().search_stream(ens, batches, need_attn)
            return
        yield from self._run(ens, batches, need_attn, constraints)

    def _opened(self, beams: Beams, constraints: Optional[ConstraintMap]) -> Beams:
        sp, n = self.sp, len(beams.ids)
        table = PhraseTable.of(beams.ids, constraints, beams.row_max, (sp.bos, sp.eos, sp.pad))
        return ConstrainedBeams.of(beams, table, Progress.start(n, table.count),
                                   torch.zeros(n, table.count + 1, dtype=torch.long))

    def _rules(self, lprobs: torch.Tensor, beams: Beams, step: int | torch.Tensor) -> None:
        """Beam search's rules; then each row's constraint candidates are read (``pending``) and only then are the
        free tokens restricted (the module's docstring): a committed row has none (its phrase's next token is its
        one candidate); a row that can still complete a phrase may not end, nor go on when it would have ended, nor
        repeat a piece of that phrase; and a row of a sentence with phrases does not repeat its last token or a
        NO_REPEAT-gram."""
        super()._rules(lprobs, beams, step)
        assert isinstance(beams, ConstrainedBeams)
        table, p, rows = beams.table, beams.progress, lprobs.size(0)
        if not bool(table.lengths.any()):  # no running sentence has a phrase (_choose: beam search's own)
            return
        sent = torch.arange(rows) // (rows // len(beams.ids))  # (N,) each row's sentence
        room = beams.row_max - step  # (N,) tokens each row may still generate, this one included
        last = self._tail(beams, table, 0)  # (N, L)
        tails = last[:, 1:]  # (N, L-1)
        tokens, allowed, at = cs.forced(table, p, sent, room, last, cs.glued(table, sent, last))  # (N, C)
        beams.pending = (tokens, lprobs.gather(1, tokens.clamp(min=0)).masked_fill(~allowed, NEG_INF), at)
        lprobs.index_fill_(0, torch.nonzero(p.active >= 0).squeeze(1), NEG_INF)
        to_meet = cs.can_meet_more(table, p, sent, room)  # (N,)
        waiting = to_meet & (p.active < 0)  # (N,) free rows whose end is banned
        if bool(waiting.any()):
            ended = waiting & (lprobs[:, self.sp.eos] > ENDED)  # (N,)
            lprobs.index_fill_(0, torch.nonzero(ended).squeeze(1), NEG_INF)
            row, col = torch.nonzero(cs.echoes(table, p, sent, tails), as_tuple=True)
            lprobs[row, tails[row, col]] = NEG_INF
        free = torch.nonzero(table.lengths.any(1)[sent] & (p.active < 0)).squeeze(1)  # (N',)
        generated = beams.window[free, 1:]  # (N', t)
        if free.numel() and generated.size(1):
            lprobs[free, generated[:, -1]] = NEG_INF
        if free.numel() and generated.size(1) >= NO_REPEAT:
            row, banned = repeated_ngram_ends(generated, NO_REPEAT)
            lprobs[free[row], banned] = NEG_INF
        lprobs[:, self.sp.eos].masked_fill_(to_meet, NEG_INF)

    def _best(self, hyps: list[Hypothesis]) -> list[Hypothesis]:
        return sorted(hyps, key=lambda x: (x.unmet, -x.score))[: self.gen.nbest]

    def _choose(self, ens: EnsembleModel, beams: Beams, cand: torch.Tensor, first_row: torch.Tensor,
                step_of: torch.Tensor, first: bool, joining: Optional[Beams] = None
                ) -> tuple[Optional[Beams], list[tuple[int, list[Hypothesis]]]]:
        """Beam search's choice (BeamSearchBase._choose) with the candidates and allocation of the module's
        docstring: ``cand`` (n, w*V) each sentence's scores over its w rows (w = 1 at its first step)."""
        assert isinstance(beams, ConstrainedBeams)
        k, table = self.gen.beam, beams.table
        if not bool(table.lengths.any()):  # no running sentence has a phrase: beam search's own choice (_keep)
            return super()._choose(ens, beams, cand, first_row, step_of, first, joining)
        n, w = cand.size(0), 1 if first else k
        vocab, count = cand.size(1) // w, table.count

        # Candidates: the 2k best, each row's best, each row's constraint candidates (one per phrase).
        width = min(2 * k, cand.size(1))
        top_scores, top_idx = wide_topk(cand, width)  # (n, 2k)
        best_scores, best_tokens = self._row_best(beams, cand.view(n * w, vocab))  # (N,)
        best_scores, best_tokens = best_scores.view(n, w), best_tokens.view(n, w)
        tails = self._tail(beams, table)  # (N, L-1)
        glue = cs.glued(table, torch.arange(tails.size(0)) // w, self._tail(beams, table, 0))  # (N, L) or None
        assert beams.pending is not None  # this step's, read by _rules
        f_tokens, f_lprobs, f_at = beams.pending  # (N, C)
        f_scores = f_lprobs + beams.scores[:, -1:]  # (N, C)
        scores = torch.cat([top_scores, best_scores, f_scores.view(n, w * count)], 1)  # (n, M)
        own_rows = torch.arange(w).expand(n, w)
        local = torch.cat([torch.div(top_idx, vocab, rounding_mode="floor"), own_rows,
                           own_rows.repeat_interleave(count, 1)], 1)  # (n, M) the parent among the sentence's rows
        tokens = torch.cat([top_idx % vocab, best_tokens, f_tokens.view(n, w * count)], 1)  # (n, M)
        parent = first_row + local  # (n, M)
        choice = torch.cat([beams.progress.active[parent[:, : width + w]],  # a committed row's token continues
                            torch.arange(count).repeat(w).expand(n, w * count)], 1)  # (n, M)
        at = torch.cat([beams.progress.done[parent[:, : width + w]], f_at.view(n, w * count)], 1)  # (n, M)
        m = scores.size(1)

        # Each candidate's progress, bank and phrases lacked.
        flat = parent.view(-1)  # (n*M,)
        cand_sent = torch.arange(n).repeat_interleave(m)  # (n*M,)
        before = beams.progress.rows(flat)
        new = cs.advance(table, before, cand_sent, tokens.view(-1), choice.view(-1), at.view(-1), tails[flat],
                         None if glue is None else glue[flat])
        banks = cs.bank(table, new, cand_sent).view(n, m)  # (n, M)
        lacks = cs.unmet(table, new.met, cand_sent).view(n, m)  # (n, M)

        # Equal candidates (the same tokens so far and the same progress) are kept once; then the beams are dealt
        # bank by bank: a candidate's key is its rank within its bank, then its bank, highest first.
        sequence = before.same.view(n, m) * SPAN + tokens  # (n, M) equal: the same tokens so far
        idx = torch.arange(m)
        better = (scores.unsqueeze(1) > scores.unsqueeze(2)) | (
            (scores.unsqueeze(1) == scores.unsqueeze(2)) & (idx.view(1, 1, m) < idx.view(1, m, 1)))  # [i, j]: j first
        same = ((sequence.unsqueeze(1) == sequence.unsqueeze(2))
                & (new.active.view(n, 1, m) == new.active.view(n, m, 1))
                & (new.done.view(n, 1, m) == new.done.view(n, m, 1)) & (new.run.view(n, 1, m) == new.run.view(n, m, 1))
                & (new.met.view(n, 1, m, -1) == new.met.view(n, m, 1, -1)).all(3))  # (n, M, M)
        valid = torch.isfinite(scores) & ~(same & better).any(2)  # (n, M)
        rivals = better & (banks.unsqueeze(1) == banks.unsqueeze(2)) & valid.unsqueeze(1)  # (n, M, M)
        n_banks = int(banks.max()) + 1
        key = torch.where(valid, rivals.sum(2) * n_banks + (n_banks - 1 - banks), LAST)  # (n, M)
        order = key.argsort(1)  # (n, M) the allocation's order
        scores, tokens, parent = scores.gather(1, order), tokens.gather(1, order), parent.gather(1, order)
        valid, lacks, sequence = valid.gather(1, order), lacks.gather(1, order), sequence.gather(1, order)
        picked = order + torch.arange(n).unsqueeze(1) * m  # (n, M) into the flat candidates
        is_eos = tokens == self.sp.eos  # (n, M)

        # The eos candidates among the first k are finished, k per level of phrases lacked at most.
        eos_top = is_eos[:, :k] & valid[:, :k]  # (n, k)
        lack_top = lacks[:, :k].clamp(max=beams.tally.size(1) - 1)  # (n, k)
        held = beams.tally.cumsum(1).gather(1, lack_top)  # (n, k) finished ones lacking no more
        ahead = (eos_top.unsqueeze(1) & (lack_top.unsqueeze(1) <= lack_top.unsqueeze(2))
                 & torch.ones(k, k, dtype=torch.bool).tril()).sum(2)  # (n, k) eos candidates up to here, as good
        take = eos_top & (held + ahead <= k)
        if bool(take.any()):
            self._finalise(beams, take, parent[:, :k], scores[:, :k], step_of, lacks[:, :k])
            beams.n_done += take.sum(1)
            beams.tally += F.one_hot(lack_top, beams.tally.size(1)).mul(take.unsqueeze(2)).sum(1)

        # The k first others continue; then which sentences are done.
        live = valid & ~is_eos  # (n, M)
        rank = torch.where(live, idx.expand(n, m), LAST)
        sel = rank.topk(min(k, m), dim=1, largest=False).indices  # (n, k) in allocation order
        if sel.size(1) < k:  # tiny vocabulary: pad with dead beams
            sel = torch.cat([sel, sel[:, :1].expand(n, k - sel.size(1))], 1)
        alive = live.gather(1, sel)  # (n, k)
        rows, next_tokens = parent.gather(1, sel), tokens.gather(1, sel)  # (n, k)
        next_scores = scores.gather(1, sel).masked_fill(~alive, NEG_INF)
        chosen = new.rows(picked.gather(1, sel).view(-1))  # (n*k,) progress of the new beams
        seq = sequence.gather(1, sel)  # (n, k)
        chosen.same = ((seq.unsqueeze(2) == seq.unsqueeze(1)).int().argmax(2)).view(-1)  # first row alike
        sent_rows = torch.arange(n).repeat_interleave(k)
        after = cs.best_unmet(table, chosen, sent_rows, (beams.row_max[rows] - step_of[rows] - 1).view(-1))
        reach = after.view(n, k).masked_fill(~alive, LAST).min(1).values  # (n,) fewest lacked still possible
        good = beams.tally.cumsum(1).gather(1, reach.clamp(max=count).unsqueeze(1)).squeeze(1)  # (n,)
        heads = first_row.squeeze(1)
        done = (good >= k) | (beams.row_max[heads] <= step_of[heads]) | ~alive.any(1)  # (n,)
        leaving = torch.nonzero(done).squeeze(1).tolist()
        results = [(beams.ids[i], self._best(beams.finished[i])) for i in leaving]
        if len(leaving) == n:
            return joining, results
        new_rows = {name: t.view(n, k, *t.shape[1:]) for name, t in chosen.as_dict().items()}
        return self._keep(ens, beams, done, bool(leaving), rows, next_tokens, next_scores, first, joining,
                          new_rows), results

    def _keep(self, ens: EnsembleModel, beams: Beams, done: torch.Tensor, leaving: bool, rows: torch.Tensor,
              tokens: torch.Tensor, scores: torch.Tensor, first: bool, joining: Optional[Beams],
              new_rows: Optional[dict[str, torch.Tensor]] = None) -> Beams:
        """BeamSearchBase._keep; after beam search's own choice (``new_rows`` None: no phrase in the batch), the
        new rows' progress (none, but which rows hold the same tokens) and the finished tally are brought along."""
        if new_rows is None:
            assert isinstance(beams, ConstrainedBeams)
            beams.tally[:, 0] = beams.n_done  # none lacks a phrase
            p = beams.progress.rows(rows.view(-1))
            width = beams.table.tokens.size(2)
            seq = p.same.view_as(tokens) * SPAN + tokens  # (n, k) equal: the same tokens
            p.same = (seq.unsqueeze(2) == seq.unsqueeze(1)).int().argmax(2).view(-1)
            p.run = (p.run + 1).clamp(max=width)
            new_rows = {name: t.view(*tokens.shape, *t.shape[1:]) for name, t in p.as_dict().items()}
        return super()._keep(ens, beams, done, leaving, rows, tokens, scores, first, joining, new_rows)

    @staticmethod
    def _row_best(beams: "ConstrainedBeams", cand: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The best candidate (score, token) of each row (N,) of ``cand`` (N, V) that met a phrase and is free (-inf
        for the others): such rows, often behind the others in score, go on with their own best token. A committed
        row's one candidate is its phrase's; a row that met none is searched as by beam search."""
        p = beams.progress
        rows = torch.nonzero((p.active < 0) & p.met.any(1)).squeeze(1)  # (N',)
        scores = torch.full((cand.size(0),), NEG_INF)
        tokens = torch.zeros(cand.size(0), dtype=torch.long)
        if rows.numel():
            found = cand.index_select(0, rows).max(1)
            scores[rows], tokens[rows] = found.values, found.indices
        return scores, tokens

    @staticmethod
    def _tail(beams: Beams, table: PhraseTable, short: int = 1) -> torch.Tensor:
        """(N, L-short) the last tokens each row generated (L-1: a phrase of L tokens ends with the next one; L:
        with the token before it, where a word must end); columns before a row's first token hold bos or pad (or
        -2), which no phrase holds."""
        width = table.tokens.size(2) - short
        window = beams.window[:, 1:]  # (N, t) generated so far
        if window.size(1) < width:
            window = F.pad(window, (width - window.size(1), 0), value=-2)
        return window[:, window.size(1) - width:]
