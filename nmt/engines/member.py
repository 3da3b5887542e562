"""An engine's model as an ensemble member: :class:`StepMember` answers what nmt's searches ask of a
TransformerModel (``encoder(...)``, ``decoder(tokens, enc, incremental_state=cache)``, reordering), backed by two
functions of flat tensors, the encoder and the decoder step of nmt.engines.step, whoever runs them (torch,
onnxruntime, an ahead-of-time compiled package). So every search (beam, greedy, sampling, ...) runs unchanged on
every engine, through nmt.generation.ensemble.EnsembleModel.

Rows that started at different steps share its cache when the exported step masks left pads (``merges_rows``, from
the export's record: nmt.engines.step.masks_left_pads), so a search refills finished rows (greedy search, a server's
live queue) on every engine as on the eager one. What an engine's member does not do: give attention weights, or
run under autocast / --compile.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence

import torch
from torch import Tensor

from nmt.config.model import ModelConfig
from nmt.engines.step import (
    DecoderStep,
    EncoderForExport,
    flatten,
    grouped,
    masks_left_pads,
    shares_encoder_rows,
    unflatten,
)
from nmt.errors import UsageError
from nmt.models.decoder_cache import DecoderCache, pad_time
from nmt.models.transformer import EncoderOut, TransformerModel

# (src_tokens (b, S) int64) -> [encoder_out, encoder_padding, cross_k_0, cross_v_0, ...] (nmt.engines.step)
EncodeFn = Callable[[Tensor], Sequence[Tensor]]
# [tokens, positions, encoder_padding, *cache] -> [log_probs, *new self cache] (nmt.engines.step)
StepFn = Callable[[Sequence[Tensor]], Sequence[Tensor]]


class StepEncoderOut(NamedTuple):
    """The encoder's output as a search keeps it: one row per sentence (or per beam), reordered with them."""

    out: Tensor  # (b, S, C)
    padding_mask: Tensor  # (b, S) True at pads
    cross: tuple[Tensor, ...]  # per decoder layer its cross-attention keys (b, H, S, d_k) and values (b, H, S, D)


class StepMember:
    """A model run by an engine, as an EnsembleModel member (TransformerModel's interface for searches).

    ``encode`` and ``step`` are the engine's encoder and decoder step (nmt.engines.step's flat signatures, torch
    tensors in and out); ``cfg`` the model's config (searches read its decoder start and position limits);
    ``shares_encoder_rows``: a sentence's beams may share its encoder row (every encoder-decoder attention's queries
    are independent: AttentionBase.independent_queries); ``merges_rows``: its step masks each row's left pads, so
    searches may merge rows that started at different steps (an export without the record's ``merges_rows`` did not
    say so: its rows are never merged); ``engine`` names it in messages."""

    gives_log_probs = True  # the step ends in a log-softmax: the ensemble does not take another

    def __init__(self, cfg: ModelConfig, encode: EncodeFn, step: StepFn, *, shares_encoder_rows: bool,
                 engine: str, merges_rows: bool = False):
        self.cfg = cfg
        self._encode = encode
        self._step = step
        self.shares_encoder_rows = shares_encoder_rows
        self.merges_rows = merges_rows
        self.engine = engine
        self.max_source_positions: int = cfg.max_source_positions
        self.max_target_positions: int = cfg.max_target_positions

    def eval(self) -> StepMember:
        """Inference is all an engine does (EnsembleModel calls it on every member)."""
        return self

    def encoder(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None) -> StepEncoderOut:
        """src_tokens (b, S), right-padded; the lengths are read from the pads, as the eager encoder does."""
        out, padding, *cross = self._encode(src_tokens)
        return StepEncoderOut(out, padding, tuple(cross))

    def decoder(self, prev_output_tokens: Tensor, encoder_out: StepEncoderOut,
                incremental_state: Optional[DecoderCache] = None, need_weights: bool = False) -> Tensor:
        """Log-probabilities (B, 1, V) of the token after each row of ``prev_output_tokens`` (B, t); the cache
        ``incremental_state`` is given the step's keys and values (in place, as the eager decoder fills it)."""
        if need_weights:
            raise UsageError(f"the {self.engine} engine gives no attention weights (alignments, attention plots); "
                             "use --engine torch")
        if incremental_state is None:
            raise ValueError(f"the {self.engine} engine decodes step by step: pass new_incremental_state()")
        pads = incremental_state.left_pads  # (B,) rows that joined later, or None
        if pads is not None and not self.merges_rows:
            raise ValueError(f"the {self.engine} engine's export does not mask left pads: its rows are not merged")
        B, t = prev_output_tokens.shape
        b = encoder_out.padding_mask.size(0)  # encoder rows: B, or B / beams when beams share them
        tokens = grouped(prev_output_tokens[:, -1].contiguous(), b)  # (b, G)
        positions = torch.full_like(tokens, t - 1) if pads is None else grouped(t - 1 - pads, b)  # (b, G)
        outputs = self._step([tokens, positions, encoder_out.padding_mask,
                              *flatten(incremental_state, encoder_out.cross, B)])
        incremental_state.assign(unflatten(outputs[1:], pads))
        return outputs[0].reshape(B, 1, -1)  # (B, 1, V)

    @staticmethod
    def new_incremental_state() -> DecoderCache:
        return DecoderCache(room=False)

    def merge_encoder_out(self, a: StepEncoderOut, b: StepEncoderOut) -> StepEncoderOut:
        """The rows of ``a`` then those of ``b``, the shorter source right-padded (masked, as the eager model pads
        it; its cross keys and values zeros); only when ``merges_rows``."""
        if not self.merges_rows:
            raise ValueError(f"the {self.engine} engine's export does not mask left pads: its rows are not merged")
        joined = TransformerModel.merge_encoder_out(EncoderOut(a.out, a.padding_mask),
                                                    EncoderOut(b.out, b.padding_mask))
        B, S = joined.out.shape[:2]
        padding = joined.padding_mask if joined.padding_mask is not None else torch.zeros(B, S, dtype=torch.bool)
        return StepEncoderOut(joined.out, padding,
                              tuple(torch.cat([pad_time(x, S), pad_time(y, S)]) for x, y in zip(a.cross, b.cross)))

    @staticmethod
    def reorder_encoder_out(encoder_out: StepEncoderOut, new_order: Tensor) -> StepEncoderOut:
        """Rows of the batch in ``new_order`` (e.g. each sentence repeated for its paths)."""
        return StepEncoderOut(encoder_out.out.index_select(0, new_order),
                              encoder_out.padding_mask.index_select(0, new_order),
                              tuple(t.index_select(0, new_order) for t in encoder_out.cross))

    @staticmethod
    def reorder_incremental_state(incremental_state: DecoderCache, new_order: Tensor) -> None:
        """In place: the cache's row b becomes its row ``new_order[b]``."""
        incremental_state.assign(incremental_state.reorder(new_order))


def torch_member(model: TransformerModel) -> StepMember:
    """The model's :class:`EncoderForExport` and :class:`DecoderStep` run in eager torch: what every engine runs,
    the reference their tests compare with the eager decoder."""
    encoder, step = EncoderForExport(model), DecoderStep(model)

    def run_step(inputs: Sequence[Tensor]) -> Sequence[Tensor]:
        return step(*inputs)

    return StepMember(model.cfg, encoder, run_step, shares_encoder_rows=shares_encoder_rows(model),
                      engine="torch step", merges_rows=masks_left_pads(model))
