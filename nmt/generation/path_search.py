"""Searches that follow independent paths, one per row: greedy (one path per sentence) and
sampling (--beam samples per sentence). A subclass only says how a row picks its next token.

Rows that emit eos leave the batch once they are an eighth of it (FINISHED_SHARE), so the work of each
step stays about proportional to the rows still running, without copying every cache whenever one row
ends; and once fewer than half of a batch's sentences still run, waiting sentences join the running rows
(``Search.search_stream``), so a few long outputs do not leave the machine decoding almost empty batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional

import torch

from nmt.generation.constraints import ConstraintMap, refuse_constraints
from nmt.generation.ensemble import EnsembleModel
from nmt.generation.search import Hypothesis, Rows, Search, SentenceQueue, SourceBatch
from nmt.registry import OptionsT

# Rows whose path has ended stay in the batch, decoded for nothing, until they are this share of it: leaving
# copies every cache entry of the rows that stay, a large share of a greedy search's time when done at every step
# a row ended (benchmarks/RESULTS.md)
FINISHED_SHARE = 1 / 8


@dataclass
class Paths(Rows):
    """Independent rows; ``scores`` holds the log-prob of each generated token."""

    ids: list[int] = field(default_factory=list)  # (N) sentence id of each row
    finished: Optional[torch.Tensor] = None  # (N,) bool: the row's path has ended (it waits to leave); None: none has


class PathSearch(Search[OptionsT]):
    """Decode ``paths_per_sentence()`` independent paths per sentence."""

    def paths_per_sentence(self) -> int:
        return 1

    def choose(self, lprobs: torch.Tensor) -> torch.Tensor:
        """The next token (N,) of each row given its log-probs (N, V)."""
        raise NotImplementedError

    def choose_scored(self, lprobs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The next token (N,) of each row and its log-prob (N,); a strategy that finds both at once overrides it."""
        nxt = self.choose(lprobs)
        return nxt, lprobs.gather(1, nxt.unsqueeze(1)).squeeze(1)

    @torch.inference_mode()
    def search_stream(self, ens: EnsembleModel, batches: Iterable[SourceBatch], need_attn: bool = False,
                      constraints: Optional[ConstraintMap] = None) -> Iterator[tuple[int, list[Hypothesis]]]:
        refuse_constraints(self.name(), constraints)
        queue = SentenceQueue(batches, self.sp.pad, refill=ens.can_merge and not need_attn)
        paths: Optional[Paths] = None
        found: dict[int, list[Hypothesis]] = {}  # sentence id -> its finished paths so far
        since_start = 0  # steps since sentences last started
        while True:
            new = queue.take(len(found), since_start)
            since_start += 1
            if new is not None:
                since_start = 0
                ids, src_tokens, src_lengths = new
                found.update({i: [] for i in ids})
                started = self._advance(ens, self._start(ens, ids, src_tokens, src_lengths, need_attn), found)
                if started is not None and paths is not None:  # rows waiting to leave leave before a merge
                    started = self._without_finished(ens, started, always=True)
                    paths = self._without_finished(ens, paths, always=True)
                if started is not None:
                    paths = started if paths is None else Paths(
                        **paths.merged_fields(started, ens, self.sp.pad), ids=paths.ids + started.ids)
            elif paths is not None:
                paths = self._advance(ens, paths, found)
            p = self.paths_per_sentence()
            for i in [i for i, hyps in found.items() if len(hyps) == p]:
                hyps = sorted(found.pop(i), key=lambda h: -h.score)
                yield i, hyps[: self.gen.nbest]
            if paths is None and queue.empty():
                return

    def _start(self, ens: EnsembleModel, ids: list[int], src_tokens: torch.Tensor, src_lengths: torch.Tensor,
               need_attn: bool) -> Paths:
        """New sentences' rows (``paths_per_sentence`` each), before their first step."""
        p = self.paths_per_sentence()
        rows = len(ids) * p
        encs = ens.encode(src_tokens, src_lengths)
        if p > 1:
            encs = ens.reorder_encoder(encs, torch.arange(len(ids)).repeat_interleave(p))
        return Paths(encs, ens.new_states(), torch.full((rows, 1), self.sp.bos, dtype=torch.long),
                     torch.zeros(rows, 1), torch.zeros(rows, dtype=torch.long),
                     self.max_lengths(ens, src_lengths).repeat_interleave(p),
                     torch.zeros(rows, 0, src_tokens.size(1)) if need_attn else None,
                     ids=[i for i in ids for _ in range(p)])

    def _advance(self, ens: EnsembleModel, paths: Paths, found: dict[int, list[Hypothesis]]) -> Optional[Paths]:
        """One step of every row; rows that end go to ``found``. None when no row is left running."""
        steps = paths.steps()  # (N,) tokens before this one
        lprobs, step_attn = ens.step(paths.window, paths.encs, paths.states, paths.attn is not None)  # (N, V)
        self.apply_rules(lprobs, steps if paths.window.size(1) > 1 else 0, paths.window[:, 1:], paths.row_max)
        paths.add_attention(step_attn)
        nxt, scores = self.choose_scored(lprobs)  # (N,), (N,)
        ended = nxt == self.sp.eos  # (N,)
        if paths.finished is not None:
            ended &= ~paths.finished  # a finished row's tokens are not looked at
        finished = paths.finished
        if bool(ended.any()):
            width = paths.window.size(1)
            for r in torch.nonzero(ended).squeeze(1).tolist():
                s = int(steps[r])
                tokens = torch.cat([paths.window[r, width - s:], nxt[r:r + 1]])  # (s+1,)
                positional = torch.cat([paths.scores[r, width - s:], scores[r:r + 1]])  # (s+1,)
                a = paths.attn[r, width - s - 1:].clone() if paths.attn is not None else None
                score = float(self.normalise(positional.sum().unsqueeze(0), s + 1))
                found[paths.ids[r]].append(Hypothesis(tokens, score, positional, a))
            finished = ended if finished is None else finished | ended
        extended = Paths(**paths.extended_fields(None, nxt, scores, 0, paths.encs, paths.states), ids=paths.ids,
                         finished=finished)
        return self._without_finished(ens, extended, always=False)

    def _without_finished(self, ens: EnsembleModel, paths: Optional[Paths], always: bool) -> Optional[Paths]:
        """``paths`` without its finished rows (None when no row is left): when ``always``, or once they are
        FINISHED_SHARE of the rows, or when one of them reaches its length limit (one more step could take
        it past the positions the model has)."""
        if paths is None or paths.finished is None:
            return paths
        finished = paths.finished
        n = int(finished.sum())
        if n == finished.numel():
            return None
        if not always and n < FINISHED_SHARE * finished.numel() and not bool(
                (paths.steps() >= paths.row_max)[finished].any()):
            return paths
        keep = torch.nonzero(~finished).squeeze(1)  # (N',)
        drop = int(paths.pads[keep].min())  # columns no remaining row owns
        encs = ens.reorder_encoder(paths.encs, keep)
        states = ens.reorder_states(paths.states, keep, drop_left=drop)
        return Paths(**paths.selected_fields(keep, drop, encs, states), ids=[paths.ids[r] for r in keep.tolist()])
