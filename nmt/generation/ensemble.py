"""One or several models seen by a search as a single next-token distribution.

Each model keeps its own encoder output and key/value cache (incremental state); a step
feeds only the newest token. An ensemble's distribution is the average of the members'
probabilities taken in log space (logsumexp - log n), as fairseq does.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch
import torch.nn.functional as F

from nmt.models.decoder_cache import DecoderCache

DEFAULT_MAX_POSITIONS = 1024


def _split_decoder_output(out: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits, cross-attention (B, T, S) or None) from what the decoder returned.

    With ``need_weights`` the decoder returns ``(logits, {"cross": [per layer (B, H, T, S)]})``;
    the alignment uses the last layer averaged over its heads, as fairseq does."""
    if isinstance(out, torch.Tensor):
        return out, None
    logits, extra = out[0], (out[1] if len(out) > 1 else None)
    attn = extra.get("cross") if isinstance(extra, dict) else None
    if isinstance(attn, (list, tuple)):
        attn = attn[-1] if attn else None
    if attn is not None and attn.dim() == 4:
        attn = attn.mean(dim=1)  # (B, T, S) average over heads
    return logits, attn


def _can_merge(model: torch.nn.Module) -> bool:
    """Whether rows of this model's caches can be merged (``merge_encoder_out`` exists, its cache is a
    DecoderCache and every self-attention keeps the default growing cache, which DecoderCache.merge can align)."""
    from nmt.models.attention import AttentionBase

    merges = getattr(model, "merges_rows", None)  # an engine's member says so itself (nmt.engines.member)
    if isinstance(merges, bool):
        return merges
    if not all(callable(getattr(model, name, None)) for name in ("merge_encoder_out", "new_incremental_state")):
        return False
    own = [m for m in model.modules() if isinstance(m, AttentionBase) and m.self_attention]
    return all(type(m).cache_append is AttentionBase.cache_append for m in own)


def _can_share_encoder(model: torch.nn.Module) -> bool:
    """Whether a sentence's beams can share one encoder-side cache row (every encoder-decoder
    attention is an AttentionBase whose queries do not interact: AttentionBase.independent_queries)."""
    from nmt.models.attention import AttentionBase

    shares = getattr(model, "shares_encoder_rows", None)  # an engine's member says so itself (nmt.engines.member)
    if isinstance(shares, bool):
        return shares
    cross = [m for m in model.modules() if getattr(m, "self_attention", True) is False]
    return bool(cross) and all(isinstance(m, AttentionBase) and m.independent_queries for m in cross)


class EnsembleModel:
    """The models a search decodes with, their encoder outputs and caches."""

    def __init__(self, models: Sequence[torch.nn.Module]):
        if not models:
            raise ValueError("an ensemble needs at least one model")
        # duck-typed members: TransformerModel's interface (nmt.models.architecture), which nn.Module's typing
        # cannot name (its __getattr__ says every unknown attribute is a Tensor or a Module)
        self.models: list[Any] = list(models)
        for m in self.models:
            m.eval()
        self.can_merge = all(_can_merge(m) for m in self.models)  # searches may then refill finished rows
        self.can_share_encoder = all(_can_share_encoder(m) for m in self.models)  # beams may share encoder rows
        self.decoders: list[Any] = [m.decoder for m in self.models]  # what step() calls: compiled by compile_decoders
        # members whose decoder gives log-probabilities already (an engine's step ends in its log-softmax)
        self.gives_log_probs = [getattr(m, "gives_log_probs", False) is True for m in self.models]

    def compile_decoders(self) -> None:
        """--compile: every member's decoder step through torch.compile (inductor). Shapes are dynamic (rows and
        cache length change at every step), and the weights are frozen into the compiled code (inference only),
        which lets inductor pre-pack them for its products. A step of a new kind (the first one, a reordered or
        merged cache, attention weights asked for) compiles once more on first sight: the caller lets dynamo keep
        enough variants (``nmt.cpu_speed.process_settings(compiled=True)``)."""
        self.decoders = [torch.compile(m.decoder, dynamic=True, options={"freezing": True}) for m in self.models]

    def max_source_positions(self) -> int:
        """The longest source every member was built for (its model config's max source positions)."""
        return min(int(m.cfg.max_source_positions) for m in self.models)

    def max_target_positions(self) -> int:
        """The longest output every member can position-encode (its max target positions)."""
        limits = []
        for m in self.models:
            decoder = getattr(m, "decoder", None)
            positional = getattr(getattr(decoder, "embedder", None), "positional", None)
            for owner, name in ((m, "max_target_positions"), (decoder, "max_target_positions"),
                                (positional, "max_positions")):
                value = getattr(owner, name, None)
                if callable(value):
                    value = value()
                if isinstance(value, int) and value > 0:
                    limits.append(value)
                    break
        return min(limits) if limits else DEFAULT_MAX_POSITIONS

    def encode(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> list[Any]:
        return [m.encoder(src_tokens, src_lengths) for m in self.models]

    def new_states(self) -> list[Any]:
        """An empty cache per member: its ``new_incremental_state()`` (a DecoderCache), or a dict for a model of
        its own kind without one (its ``reorder_incremental_state`` reorders it)."""
        return [m.new_incremental_state() if hasattr(m, "new_incremental_state") else {} for m in self.models]

    def reorder_encoder(self, encs: list[Any], order: torch.Tensor) -> list[Any]:
        return [m.reorder_encoder_out(e, order) for m, e in zip(self.models, encs)]

    def reorder_states(self, states: list[Any], order: torch.Tensor, encoder_order: Optional[torch.Tensor] = None,
                       keep_encoder: bool = False, drop_left: int = 0) -> list[Any]:
        """New caches holding the rows of ``states`` in ``order`` (the given ones stay as they are). The
        encoder-side entries (cross-attention keys/values) follow ``encoder_order`` if given (beams sharing their
        sentence's row), else ``order``; ``keep_encoder`` leaves them alone (beams re-ranked within their
        sentences: those entries are identical across a sentence's rows, or shared). ``drop_left``: merged caches
        only, the leading positions no remaining row owns."""
        out: list[Any] = []
        for m, s in zip(self.models, states):
            if isinstance(s, DecoderCache):
                out.append(s.reorder(order, encoder_order=encoder_order, keep_encoder=keep_encoder,
                                     drop_left=drop_left))
                continue
            s = dict(s)  # a model of its own kind: its reorder, in place (returning None) or returning the new one
            new = m.reorder_incremental_state(s, order, **({"drop_left": drop_left} if drop_left else {}))
            out.append(s if new is None else new)
        return out

    def merge(self, encs: list[Any], states: list[Any], more_encs: list[Any], more_states: list[Any],
              order: Optional[torch.Tensor] = None, encoder_order: Optional[torch.Tensor] = None,
              drop_left: int = 0) -> tuple[list[Any], list[Any]]:
        """Encoder outputs and caches holding the rows of the first pair then those of the second
        (sentences that joined later); only when ``can_merge``. ``order``, ``encoder_order`` and ``drop_left``
        reorder the first caches' rows in the same copy, as ``reorder_states`` would (``encs`` must already be in
        ``encoder_order``'s order)."""
        encs = [m.merge_encoder_out(a, b) for m, a, b in zip(self.models, encs, more_encs)]
        return encs, [a.merge(b, order=order, encoder_order=encoder_order, drop_left=drop_left)
                      for a, b in zip(states, more_states)]

    def step(self, tokens: torch.Tensor, encs: list[Any], states: list[Any],
             need_attn: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probabilities (N, V) of the next token after prefix ``tokens`` (N, t), in fp32,
        and the cross-attention (N, S) of that step averaged over the members (or None)."""
        lprobs_all, attn_sum = [], None
        for decoder, enc, state, given in zip(self.decoders, encs, states, self.gives_log_probs):
            extra = {"need_weights": True} if need_attn else {}
            logits, attn = _split_decoder_output(decoder(tokens, enc, incremental_state=state, **extra))
            # fp32 first: torch's log-softmax of bf16 into fp32 (dtype=) runs 3x slower than the cast plus the fp32 one
            last = logits[:, -1, :].float()  # (N, V)
            lprobs_all.append(last if given else F.log_softmax(last, dim=-1))  # (N, V) fp32
            if need_attn and attn is not None:
                a = attn[:, -1, :].float()  # (N, S)
                attn_sum = a if attn_sum is None else attn_sum + a
        if len(lprobs_all) == 1:
            lprobs = lprobs_all[0]
        else:
            lprobs = torch.logsumexp(torch.stack(lprobs_all, 0), 0) - math.log(len(lprobs_all))  # (N, V)
        attn = attn_sum / len(self.models) if attn_sum is not None else None
        return lprobs, attn
