"""An engine's model as an ensemble member: :class:`StepMember` answers what nmt's searches ask of a
TransformerModel (``encoder(...)``, ``decoder(tokens, enc, incremental_state=cache)``, reordering), backed by two
functions of flat tensors, the encoder and the decoder step of nmt.engines.step, whoever runs them (torch,
onnxruntime, an ahead-of-time compiled package). So every search (beam, greedy, sampling, ...) runs unchanged on
every engine, through nmt.generation.ensemble.EnsembleModel.

What an engine's member does not do: merge rows that started at different steps (searches then do not refill
finished rows: no ``merge_encoder_out``), give attention weights, or run under autocast / --compile.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence

import torch
from torch import Tensor

from nmt.config.model import ModelConfig
from nmt.engines.step import DecoderStep, EncoderForExport, flatten, grouped, shares_encoder_rows, unflatten
from nmt.errors import UsageError
from nmt.models.decoder_cache import DecoderCache
from nmt.models.transformer import TransformerModel

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
    are independent: AttentionBase.independent_queries); ``engine`` names it in messages."""

    gives_log_probs = True  # the step ends in a log-softmax: the ensemble does not take another

    def __init__(self, cfg: ModelConfig, encode: EncodeFn, step: StepFn, *, shares_encoder_rows: bool,
                 engine: str):
        self.cfg = cfg
        self._encode = encode
        self._step = step
        self.shares_encoder_rows = shares_encoder_rows
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
        if incremental_state is None or incremental_state.left_pads is not None:
            raise ValueError(f"the {self.engine} engine decodes step by step with a cache of rows started together "
                             "(new_incremental_state(); searches do not merge rows on it)")
        B, t = prev_output_tokens.shape
        b = encoder_out.padding_mask.size(0)  # encoder rows: B, or B / beams when beams share them
        tokens = grouped(prev_output_tokens[:, -1].contiguous(), b)  # (b, G)
        positions = torch.full_like(tokens, t - 1)  # (b, G): every row is at the same step
        outputs = self._step([tokens, positions, encoder_out.padding_mask,
                              *flatten(incremental_state, encoder_out.cross, B)])
        incremental_state.assign(unflatten(outputs[1:]))
        return outputs[0].reshape(B, 1, -1)  # (B, 1, V)

    @staticmethod
    def new_incremental_state() -> DecoderCache:
        return DecoderCache()

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
                      engine="torch step")
