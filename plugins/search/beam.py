"""Beam search over a whole batch at once.

Each step scores every (beam, next token) pair of every sentence with one top-k over
(beam x vocabulary), keeps the 2*beam best candidates per sentence, finalises the eos ones
ranked within the first ``beam`` and continues the ``beam`` best others. A sentence with
``beam`` finished hypotheses (or at its length limit) leaves the batch: its rows are dropped
from the encoder output and the key/value cache, so long sentences do not make short ones pay.

The first step decodes one row per sentence (its beams are still one prefix) and only then
copies the encoder output and cache to ``beam`` rows; the encoder-side cache entries are reordered
only when sentences leave, never when beams are merely re-ranked. Tested to give fairseq-generate's
hypotheses on a converted fairseq model (tests/test_search_fairseq_parity.py).
"""

from __future__ import annotations

import torch

from nmt.generation.ensemble import EnsembleModel
from nmt.generation.search import NEG_INF, Hypothesis, Search
from nmt.registry import register_search


@register_search("beam")
class BeamSearch(Search):
    """Beam search with fairseq's length penalty (--beam, --lenpen, --nbest)."""

    @torch.inference_mode()
    def search(self, ens: EnsembleModel, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
               need_attn: bool = False) -> list[list[Hypothesis]]:
        sp, k = self.sp, self.cfg.beam
        bsz, src_len = src_tokens.shape
        max_lens = self.max_lengths(ens, src_lengths)  # (B,)
        steps = int(max_lens.max()) + 1  # the longest output, eos included

        encs = ens.encode(src_tokens, src_lengths)  # B rows until the first step is done
        states = ens.new_states()

        tokens = torch.full((bsz * k, steps + 1), sp.pad, dtype=torch.long)  # (N, steps+1), bos first
        tokens[:, 0] = sp.bos
        cum = torch.zeros(bsz * k, steps)  # (N, steps) cumulative log-prob after each token
        attn = torch.zeros(bsz * k, steps, src_len) if need_attn else None  # (N, steps, S)
        sent = torch.arange(bsz)  # original sentence of each active sentence
        row_max = max_lens.repeat_interleave(k)  # (N,)
        finished: list[list[Hypothesis]] = [[] for _ in range(bsz)]
        n_done = torch.zeros(bsz, dtype=torch.long)  # finished hypotheses per original sentence

        for step in range(steps):
            n = sent.numel()
            if step == 0:  # the k beams of a sentence are one prefix: decode it once per sentence
                lprobs, step_attn = ens.step(tokens[::k, :1], encs, states, need_attn)  # (n, V)
                self.apply_rules(lprobs, 0, tokens[::k, 1:1], row_max[::k])
                if attn is not None and step_attn is not None:
                    attn[:, 0] = step_attn.repeat_interleave(k, 0)
                vocab = lprobs.size(1)
                cand = lprobs  # (n, V)
            else:
                lprobs, step_attn = ens.step(tokens[:, : step + 1], encs, states, need_attn)  # (n*k, V)
                self.apply_rules(lprobs, step, tokens[:, 1: step + 1], row_max)
                if attn is not None and step_attn is not None:
                    attn[:, step] = step_attn
                vocab = lprobs.size(1)
                cand = lprobs.add_(cum[:, step - 1].unsqueeze(1)).view(n, k * vocab)  # (n, k*V), in place
            width = min(2 * k, cand.size(1))
            cand_scores, cand_idx = cand.topk(width, dim=1)  # (n, 2k)
            cand_beams = torch.div(cand_idx, vocab, rounding_mode="floor")  # (n, 2k)
            cand_tokens = cand_idx % vocab  # (n, 2k)
            cand_rows = torch.arange(n).unsqueeze(1) * k + cand_beams  # (n, 2k) row of the parent

            is_eos = cand_tokens == sp.eos  # (n, 2k)
            eos_top = is_eos[:, :k] & torch.isfinite(cand_scores[:, :k])  # (n, k) finalisable
            room = (k - n_done[sent]).unsqueeze(1)  # (n, 1)
            take = eos_top & (eos_top.cumsum(1) <= room)  # (n, k)
            if bool(take.any()):
                self._finalise(take, cand_rows, cand_scores, tokens, cum, attn, step, sent, finished)
                n_done[sent] += take.sum(1)
            done = (n_done[sent] >= k) | (max_lens[sent] <= step)  # (n,)

            # The beam best non-eos candidates continue (at most k of the 2k are eos).
            live_scores = cand_scores.masked_fill(is_eos, NEG_INF)  # (n, 2k)
            sel_scores, sel_pos = live_scores.topk(min(k, width), dim=1)  # (n, k)
            if sel_pos.size(1) < k:  # tiny vocabulary: pad with dead beams
                fill = k - sel_pos.size(1)
                sel_pos = torch.cat([sel_pos, sel_pos[:, :1].expand(n, fill)], 1)
                sel_scores = torch.cat([sel_scores, torch.full((n, fill), NEG_INF)], 1)
            keep = ~done  # (n,)
            if not bool(keep.any()):
                break
            rows = cand_rows.gather(1, sel_pos)[keep].view(-1)  # (n'*k,) parents of the new beams
            tokens = tokens[rows]
            tokens[:, step + 1] = cand_tokens.gather(1, sel_pos)[keep].view(-1)
            cum = cum[rows]
            cum[:, step] = sel_scores[keep].view(-1)
            if attn is not None:
                attn = attn[rows]
            row_max = row_max[rows]
            kept = torch.nonzero(keep).squeeze(1)  # (n',)
            if step == 0:  # one row per sentence so far: each becomes its k beams
                expand = kept.repeat_interleave(k)  # (n'*k,)
                states = ens.reorder_states(states, expand)
                encs = ens.reorder_encoder(encs, expand)
            elif bool(keep.all()):  # beams re-ranked within their sentences
                states = ens.reorder_states(states, rows, within_sentences=True)
            else:  # sentences left: the encoder output and its cache lose their rows
                states = ens.reorder_states(states, rows)
                encs = ens.reorder_encoder(encs, (kept.unsqueeze(1) * k + torch.arange(k)).view(-1))
            sent = sent[keep]

        nbest = self.cfg.nbest
        return [sorted(h, key=lambda x: -x.score)[:nbest] for h in finished]

    def _finalise(self, take: torch.Tensor, cand_rows: torch.Tensor, cand_scores: torch.Tensor,
                  tokens: torch.Tensor, cum: torch.Tensor, attn: torch.Tensor | None, step: int,
                  sent: torch.Tensor, finished: list[list[Hypothesis]]) -> None:
        """Store the eos candidates marked in ``take`` (n, k) as finished hypotheses."""
        pos = take.nonzero()  # (F, 2) (active sentence, candidate rank)
        rows = cand_rows[pos[:, 0], pos[:, 1]]  # (F,)
        totals = cand_scores[pos[:, 0], pos[:, 1]]  # (F,)
        seqs = tokens[rows, 1: step + 2].clone()  # (F, step+1)
        seqs[:, step] = self.sp.eos
        running = torch.cat([cum[rows, :step], totals.unsqueeze(1)], 1)  # (F, step+1)
        positional = running - torch.nn.functional.pad(running[:, :-1], (1, 0))  # (F, step+1)
        scores = self.normalise(totals, step + 1).tolist()
        owners = sent[pos[:, 0]].tolist()
        for i, owner in enumerate(owners):
            a = attn[rows[i], : step + 1].clone() if attn is not None else None
            finished[owner].append(Hypothesis(seqs[i], scores[i], positional[i], a))
