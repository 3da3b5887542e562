"""The translators of the engines other than torch, with the interface of nmt's Translator (nmt-generate,
nmt-interactive, nmt.load and nmt-serve call them the same way), and what those engines do not give.

An engine runs the search, not the model's attention weights: ONNX and compiled steps return log-probabilities
and caches only, CTranslate2 returns one head's. When alignments are asked for (--print-alignment, the API's
``alignment``), each hypothesis's encoder-decoder attention is read in one teacher-forced pass of the torch model
from the same folder (its last layer averaged over the heads, what nmt's searches keep), loaded on first need;
the same model gives CTranslate2's outputs their per-token log-probabilities (nmt.engines.ctranslate2_runtime).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, Protocol, Sequence, cast

import numpy as np
import torch
from torch import nn

from nmt.data.dictionary import Dictionary
from nmt.errors import UsageError
from nmt.generation.alignment import AttentionModel, teacher_forced_attention
from nmt.generation.constraints import ConstraintMap, has_constraints
from nmt.generation.inference import Translator, first_decoder_input, pad_batch, speed_line
from nmt.generation.search import Hypothesis, SourceBatch


class TranslatorLike(Protocol):
    """What every engine's translator gives (nmt.generation.inference.Translator's interface)."""

    seconds: float
    sentences: int
    tokens: int

    def translate(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, need_attn: bool = False,
                  where: Callable[[int], str] = ..., constraints: Optional[ConstraintMap] = None
                  ) -> list[list[Hypothesis]]: ...

    def translate_stream(self, batches: Iterable[SourceBatch], need_attn: bool = False,
                         where: Callable[[int], str] = ..., constraints: Optional[ConstraintMap] = None
                         ) -> Iterator[tuple[int, list[Hypothesis]]]: ...

    def max_source_positions(self) -> int: ...

    def check_source_lengths(self, lengths: Sequence[int] | np.ndarray, where: Callable[[int], str],
                             fix: str = ...) -> None: ...

    def speed(self) -> str: ...


class TorchReference:
    """The folder's torch model, loaded on first need, for what an engine does not give: each hypothesis's
    encoder-decoder attention (T, S), and (CTranslate2) each output token's log-probability."""

    SCORED_ROWS = 64  # hypotheses per teacher-forced pass (its logits are rows x length x vocabulary floats)

    def __init__(self, load: Callable[[], nn.Module], src_dict: Dictionary, tgt_dict: Dictionary):
        self._load = load
        self._model: Optional[Any] = None  # a TransformerModel (duck-typed, as EnsembleModel's members)
        self._first = 0
        self.src_dict = src_dict
        self.tgt_dict = tgt_dict

    def model(self) -> AttentionModel:
        """The torch model, loaded on the first call."""
        if self._model is None:
            from nmt.generation.ensemble import EnsembleModel

            model = self._load()
            self._first = first_decoder_input(EnsembleModel([model]), self.tgt_dict)
            self._model = model
        return cast(AttentionModel, self._model)

    @property
    def first(self) -> int:
        """The decoder's first input symbol (a teacher-forced pass starts from it); the model loaded first."""
        self.model()
        return self._first

    def fill(self, src: torch.Tensor, hyps: list[Hypothesis]) -> None:
        """Set ``attention`` of each of ``hyps``, the hypotheses of the source ids ``src`` (S,)."""
        model, first = self.model(), self.first
        for hyp in hyps:
            hyp.attention = teacher_forced_attention(model, src, hyp.tokens, first)[-1].mean(0)  # (T, S)

    def log_probs(self, sources: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The model's log-probability of each token of ``outputs[k]`` (T_k,), its </s> included, after the
        source ids ``sources[k]``: teacher-forced passes of SCORED_ROWS hypotheses at a time."""
        self.model()
        found: list[torch.Tensor] = []
        with torch.inference_mode():
            for start in range(0, len(outputs), self.SCORED_ROWS):
                rows = range(start, min(start + self.SCORED_ROWS, len(outputs)))
                src_tokens, src_lengths = pad_batch([sources[k] for k in rows], self.src_dict.pad())
                first = torch.tensor([self._first])
                prev, _ = pad_batch([torch.cat([first, outputs[k][:-1]]) for k in rows], self.tgt_dict.pad())
                targets, _ = pad_batch([outputs[k] for k in rows], self.tgt_dict.pad())
                logits = self._model(src_tokens, src_lengths, prev)  # type: ignore[misc]  # (N, T, V)
                picked = torch.log_softmax(logits.float(), dim=-1).gather(2, targets.unsqueeze(2)).squeeze(2)
                found += [picked[j, : len(outputs[k])] for j, k in enumerate(rows)]  # (T_k,)
        return found


class _Recorded:
    """A source of batches (possibly nmt-serve's live one: StopIteration now, more later, a ``capacity``) that
    keeps each sentence's source ids as it passes."""

    def __init__(self, batches: Iterable[SourceBatch], sources: dict[int, torch.Tensor]):
        self._batches = iter(batches)
        self._sources = sources
        self.capacity = getattr(batches, "capacity", None)

    def __iter__(self) -> "_Recorded":
        return self

    def __next__(self) -> SourceBatch:
        ids, src_tokens, src_lengths = next(self._batches)
        for i, row, n in zip(ids, src_tokens, src_lengths.tolist()):
            self._sources[i] = row[:n]
        return ids, src_tokens, src_lengths


def _with_attention(stream: Callable[[Iterable[SourceBatch]], Iterator[tuple[int, list[Hypothesis]]]],
                    batches: Iterable[SourceBatch], reference: TorchReference
                    ) -> Iterator[tuple[int, list[Hypothesis]]]:
    sources: dict[int, torch.Tensor] = {}
    for sid, hyps in stream(_Recorded(batches, sources)):
        reference.fill(sources.pop(sid), hyps)
        yield sid, hyps


@dataclass
class StepTranslator(Translator):
    """nmt's Translator over an ensemble of engine steps (``StepMember``s): nmt's own searches, unchanged; the
    attention, when asked for, from the torch model."""

    reference: Optional[TorchReference] = None

    def translate(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, need_attn: bool = False,
                  where: Callable[[int], str] = lambda k: f"sentence {k}",
                  constraints: Optional[ConstraintMap] = None) -> list[list[Hypothesis]]:
        hyps = super().translate(src_tokens, src_lengths, False, where, constraints)
        if need_attn and self.reference is not None:
            for row, n, found in zip(src_tokens, src_lengths.tolist(), hyps):
                self.reference.fill(row[:n], found)
        return hyps

    def translate_stream(self, batches: Iterable[SourceBatch], need_attn: bool = False,
                         where: Callable[[int], str] = lambda i: f"sentence {i}",
                         constraints: Optional[ConstraintMap] = None) -> Iterator[tuple[int, list[Hypothesis]]]:
        stream = super().translate_stream
        if not need_attn or self.reference is None:
            return stream(batches, False, where, constraints)
        return _with_attention(lambda b: stream(b, False, where, constraints), batches, self.reference)


def refuse_engine_constraints(constraints: Optional[ConstraintMap]) -> None:
    """CTranslate2 searches by itself and offers a target prefix only: it cannot force terms anywhere else."""
    if has_constraints(constraints):
        raise UsageError("--engine ctranslate2 cannot force terms; use --engine torch, onnxruntime or compiled")


class BatchTranslator:
    """Translator's interface over an engine that searches a batch at a time by itself (CTranslate2):
    ``search(src_tokens, src_lengths)`` gives each row's hypotheses."""

    def __init__(self, search: Callable[[torch.Tensor, torch.Tensor], list[list[Hypothesis]]],
                 max_source_positions: int, reference: Optional[TorchReference] = None):
        self._search = search
        self._max_source_positions = max_source_positions
        self.reference = reference
        self.seconds = 0.0  # time spent searching
        self.sentences = 0
        self.tokens = 0  # generated tokens of the best hypotheses, eos included

    def translate(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, need_attn: bool = False,
                  where: Callable[[int], str] = lambda k: f"sentence {k}",
                  constraints: Optional[ConstraintMap] = None) -> list[list[Hypothesis]]:
        """The hypotheses of each row of ``src_tokens``; a row without a finite one is an error naming
        ``where(row)``. The engine cannot force terms: ``constraints`` that ask any are refused."""
        from nmt.generation.inference import tally

        refuse_engine_constraints(constraints)
        start = time.perf_counter()
        hyps = self._search(src_tokens, src_lengths)
        self.seconds += time.perf_counter() - start
        sentences, tokens = tally(hyps, where)
        if need_attn and self.reference is not None:
            for k, row in enumerate(hyps):
                self.reference.fill(src_tokens[k, : int(src_lengths[k])], row)
        self.sentences += sentences
        self.tokens += tokens
        return hyps

    def translate_stream(self, batches: Iterable[SourceBatch], need_attn: bool = False,
                         where: Callable[[int], str] = lambda i: f"sentence {i}",
                         constraints: Optional[ConstraintMap] = None) -> Iterator[tuple[int, list[Hypothesis]]]:
        """(sentence id, hypotheses) of every sentence of ``batches``, a batch at a time."""
        refuse_engine_constraints(constraints)
        for ids, src_tokens, src_lengths in batches:
            def named(k: int, ids: list[int] = ids) -> str:
                return where(ids[k])

            yield from zip(ids, self.translate(src_tokens, src_lengths, need_attn, named))

    def max_source_positions(self) -> int:
        return self._max_source_positions

    def check_source_lengths(self, lengths: Sequence[int] | np.ndarray, where: Callable[[int], str],
                             fix: str = "split the sentence") -> None:
        from nmt.generation.guards import check_lengths

        check_lengths(lengths, self._max_source_positions, where, "source", fix)

    def speed(self) -> str:
        return speed_line(self.sentences, self.tokens, self.seconds)
