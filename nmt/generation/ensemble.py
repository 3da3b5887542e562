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

DEFAULT_MAX_POSITIONS = 1024
RECOMPILE_LIMIT = 64  # --compile: compiled variants of the decoder step kept at most (see compile_decoders)


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
    """Whether rows of this model's caches can be merged (``merge_encoder_out`` exists and every
    self-attention keeps the default growing cache, which nmt.models.incremental_state can align)."""
    from nmt.models.attention import AttentionBase

    if not callable(getattr(model, "merge_encoder_out", None)):
        return False
    own = [m for m in model.modules() if isinstance(m, AttentionBase) and m.self_attention]
    return all(type(m).cache_append is AttentionBase.cache_append for m in own)


def _can_share_encoder(model: torch.nn.Module) -> bool:
    """Whether a sentence's beams can share one encoder-side cache row (every encoder-decoder
    attention is an AttentionBase whose queries do not interact: AttentionBase.independent_queries)."""
    from nmt.models.attention import AttentionBase

    cross = [m for m in model.modules() if getattr(m, "self_attention", True) is False]
    return bool(cross) and all(isinstance(m, AttentionBase) and m.independent_queries for m in cross)


def _static_cache_keys(model: torch.nn.Module) -> set[str]:
    """Cache slots of encoder-decoder attention modules: they hold the projected encoder output,
    which never changes while decoding (nmt.models.attention.AttentionBase's ``state_key``)."""
    keys = (getattr(m, "state_key", None) for m in model.modules() if getattr(m, "self_attention", True) is False)
    return {key for key in keys if isinstance(key, str)}


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
        self._static_keys = [_static_cache_keys(m) for m in self.models]
        self.can_merge = all(_can_merge(m) for m in self.models)  # searches may then refill finished rows
        self.can_share_encoder = all(_can_share_encoder(m) for m in self.models)  # beams may share encoder rows
        self.decoders: list[Any] = [m.decoder for m in self.models]  # what step() calls: compiled by compile_decoders

    def compile_decoders(self) -> None:
        """--compile: every member's decoder step through torch.compile (inductor). Shapes are dynamic (rows and
        cache length change at every step), and the weights are frozen into the compiled code (inference only),
        which lets inductor pre-pack them for its products. A step of a new kind (the first one, a reordered or
        merged cache, attention weights asked for) compiles once more on first sight."""
        import torch._dynamo.config

        # each kind of step is a compiled variant of the one function; past dynamo's default of 8 a new kind would
        # run eagerly (slowly) for the rest of the process, and a server meets more (beams, padding, attention)
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
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

    def new_states(self) -> list[dict]:
        return [{} for _ in self.models]

    def reorder_encoder(self, encs: list[Any], order: torch.Tensor) -> list[Any]:
        return [m.reorder_encoder_out(e, order) for m, e in zip(self.models, encs)]

    def reorder_states(self, states: list[dict], order: torch.Tensor, encoder_order: Optional[torch.Tensor] = None,
                       keep_encoder: bool = False, drop_left: int = 0) -> list[dict]:
        """Rows of every cache in ``order``. The encoder-side entries (cross-attention keys/values)
        follow ``encoder_order`` if given (beams sharing their sentence's row), else ``order``;
        ``keep_encoder`` leaves them alone (beams re-ranked within their sentences: those entries are
        identical across a sentence's rows, or shared). ``drop_left``: merged caches only, the leading
        positions no remaining row owns."""
        extra = {"drop_left": drop_left} if drop_left else {}
        out = []
        for m, s, static in zip(self.models, states, self._static_keys):
            if static and (keep_encoder or encoder_order is not None):
                moving = {k: v for k, v in s.items() if k not in static}
                m.reorder_incremental_state(moving, order, **extra)
                if encoder_order is not None and not keep_encoder:
                    fixed = {k: v for k, v in s.items() if k in static}
                    m.reorder_incremental_state(fixed, encoder_order)
                    moving.update(fixed)
                s.update(moving)
                out.append(s)
                continue
            new = m.reorder_incremental_state(s, order, **extra)
            out.append(s if new is None else new)  # in-place reorder returns None
        return out

    def merge(self, encs: list[Any], states: list[dict], more_encs: list[Any], more_states: list[dict],
              order: Optional[torch.Tensor] = None, encoder_order: Optional[torch.Tensor] = None,
              drop_left: int = 0) -> tuple[list[Any], list[dict]]:
        """Encoder outputs and caches holding the rows of the first pair then those of the second
        (sentences that joined later); only when ``can_merge``. ``order``, ``encoder_order`` and ``drop_left``
        reorder the first caches' rows in the same copy, as ``reorder_states`` would (``encs`` must already be in
        ``encoder_order``'s order)."""
        from nmt.models.incremental_state import merge_incremental_states

        encs = [m.merge_encoder_out(a, b) for m, a, b in zip(self.models, encs, more_encs)]
        return encs, [merge_incremental_states(a, b, order, encoder_order, drop_left)
                      for a, b in zip(states, more_states)]

    def step(self, tokens: torch.Tensor, encs: list[Any], states: list[dict],
             need_attn: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probabilities (N, V) of the next token after prefix ``tokens`` (N, t), in fp32,
        and the cross-attention (N, S) of that step averaged over the members (or None)."""
        lprobs_all, attn_sum = [], None
        for decoder, enc, state in zip(self.decoders, encs, states):
            extra = {"need_weights": True} if need_attn else {}
            logits, attn = _split_decoder_output(decoder(tokens, enc, incremental_state=state, **extra))
            # fp32 first: torch's log-softmax of bf16 into fp32 (dtype=) runs 3x slower than the cast plus the fp32 one
            lprobs_all.append(F.log_softmax(logits[:, -1, :].float(), dim=-1))  # (N, V) fp32
            if need_attn and attn is not None:
                a = attn[:, -1, :].float()  # (N, S)
                attn_sum = a if attn_sum is None else attn_sum + a
        if len(lprobs_all) == 1:
            lprobs = lprobs_all[0]
        else:
            lprobs = torch.logsumexp(torch.stack(lprobs_all, 0), 0) - math.log(len(lprobs_all))  # (N, V)
        attn = attn_sum / len(self.models) if attn_sum is not None else None
        return lprobs, attn
