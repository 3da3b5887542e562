"""Searches that follow independent paths, one per row: greedy (one path per sentence) and
sampling (--beam samples per sentence). A subclass only says how a row picks its next token.

Rows that emit eos leave the batch at once (their cache entries are dropped), so the work of
each step is proportional to the rows still running.
"""

from __future__ import annotations

import torch

from nmt.generation.ensemble import EnsembleModel
from nmt.generation.search import Hypothesis, Search


class PathSearch(Search):
    """Decode ``paths_per_sentence()`` independent paths per sentence."""

    def paths_per_sentence(self) -> int:
        return 1

    def choose(self, lprobs: torch.Tensor) -> torch.Tensor:
        """The next token (N,) of each row given its log-probs (N, V)."""
        raise NotImplementedError

    @torch.inference_mode()
    def search(self, ens: EnsembleModel, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
               need_attn: bool = False) -> list[list[Hypothesis]]:
        sp, p = self.sp, self.paths_per_sentence()
        bsz, src_len = src_tokens.shape
        max_lens = self.max_lengths(ens, src_lengths)  # (B,)
        steps = int(max_lens.max()) + 1
        rows = bsz * p

        encs = ens.encode(src_tokens, src_lengths)
        if p > 1:
            encs = ens.reorder_encoder(encs, torch.arange(bsz).repeat_interleave(p))
        states = ens.new_states()
        tokens = torch.full((rows, steps + 1), sp.pad, dtype=torch.long)  # (R, steps+1) active rows
        tokens[:, 0] = sp.bos
        scores = torch.zeros(rows, steps)  # (R, steps) per-token log-probs of active rows
        attn = torch.zeros(rows, steps, src_len) if need_attn else None
        row_max = max_lens.repeat_interleave(p)  # (R,)
        active = torch.arange(rows)  # original row of each active row
        out_tokens = torch.full((rows, steps), sp.pad, dtype=torch.long)  # finished rows, by original row
        out_scores = torch.zeros(rows, steps)
        out_attn = torch.zeros(rows, steps, src_len) if need_attn else None
        out_len = torch.zeros(rows, dtype=torch.long)

        for step in range(steps):
            lprobs, step_attn = ens.step(tokens[:, : step + 1], encs, states, need_attn)  # (n, V)
            self.apply_rules(lprobs, step, tokens[:, 1: step + 1], row_max)
            nxt = self.choose(lprobs)  # (n,)
            tokens[:, step + 1] = nxt
            scores[:, step] = lprobs.gather(1, nxt.unsqueeze(1)).squeeze(1)
            if attn is not None and step_attn is not None:
                attn[:, step] = step_attn
            ended = nxt == sp.eos  # (n,)
            if not bool(ended.any()):
                continue
            idx = active[ended]
            out_tokens[idx, : step + 1] = tokens[ended, 1: step + 2]
            out_scores[idx, : step + 1] = scores[ended, : step + 1]
            if attn is not None:
                out_attn[idx, : step + 1] = attn[ended, : step + 1]
            out_len[idx] = step + 1
            keep = torch.nonzero(~ended).squeeze(1)  # (n',)
            if keep.numel() == 0:
                break
            active, tokens, scores, row_max = active[keep], tokens[keep], scores[keep], row_max[keep]
            if attn is not None:
                attn = attn[keep]
            encs = ens.reorder_encoder(encs, keep)
            states = ens.reorder_states(states, keep)

        totals = self.normalise(out_scores.sum(1), out_len.clamp(min=1))  # (R,)
        results: list[list[Hypothesis]] = []
        for s in range(bsz):
            hyps = []
            for r in range(s * p, (s + 1) * p):
                length = int(out_len[r])
                a = out_attn[r, :length] if out_attn is not None else None
                hyps.append(Hypothesis(out_tokens[r, :length], float(totals[r]), out_scores[r, :length], a))
            hyps.sort(key=lambda h: -h.score)
            results.append(hyps[: self.cfg.nbest])
        return results
