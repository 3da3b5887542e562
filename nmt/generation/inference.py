"""Translating with loaded models: the configured search for these models, and the Translator (source ids in,
hypotheses out, timing kept). Opening the data-bin is ``nmt.data.data_bin``'s, loading the models
``nmt.generation.loading``'s, the weights as eager generation runs them (--bf16, packed) ``nmt.cpu_speed``'s."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterable, Iterator, Optional, Sequence

import numpy as np
import torch

from nmt.config.generate import GenerationConfig, InferenceConfig
from nmt.config.model import ModelConfig
from nmt.data.data_bin import DataDir
from nmt.data.dictionary import Dictionary
from nmt.data.language_pair_dataset import LanguagePairDataset
from nmt.errors import UsageError
from nmt.generation.constraints import ConstraintMap
from nmt.generation.ensemble import EnsembleModel
from nmt.generation.guards import check_finite_hypotheses, check_lengths, within_positions
from nmt.generation.search import Hypothesis, Search, SourceBatch, build_search, given
from nmt.generation.search_options import check_fits_model


def autocast(bf16: bool) -> ContextManager:
    """bfloat16 autocast for the models when --bf16, else nothing."""
    return torch.autocast(device_type="cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def pad_batch(rows: Sequence[torch.Tensor], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad 1-D id tensors into (B, S) and their lengths (B,)."""
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    out = torch.full((len(rows), int(lengths.max())), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, lengths


def source_batches(dataset: LanguagePairDataset, batches: Iterable[Sequence[int] | np.ndarray]
                   ) -> Iterator[SourceBatch]:
    """Batches of sentence indices of a language-pair dataset, as a search takes them."""
    for indices in batches:
        batch = dataset.collater([dataset[int(i)] for i in indices])
        yield batch["id"].tolist(), batch["net_input"]["src_tokens"], batch["net_input"]["src_lengths"]


def tally(hyps: list[list[Hypothesis]], where: Callable[[int], str]) -> tuple[int, int]:
    """(sentences, generated tokens of their best hypotheses, eos included) of a searched batch, once every row was
    checked to have a finite hypothesis (a row without one is an error naming ``where(row)``)."""
    for k, row in enumerate(hyps):
        check_finite_hypotheses(row, where(k))
    return len(hyps), sum(len(h[0].tokens) for h in hyps if h)


@dataclass
class Translator:
    """An ensemble plus a search: source ids in, hypotheses out, with timing kept."""

    ens: EnsembleModel
    search: Search
    seconds: float = 0.0  # time spent searching
    sentences: int = 0
    tokens: int = 0  # generated tokens of the best hypotheses, eos included

    def translate(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, need_attn: bool = False,
                  where: Callable[[int], str] = lambda k: f"sentence {k}",
                  constraints: Optional[ConstraintMap] = None) -> list[list[Hypothesis]]:
        """The hypotheses of each row of ``src_tokens``; a row without a finite one is an error
        naming ``where(row)``. ``constraints``: target phrases per row index (Search.search)."""
        start = time.perf_counter()
        with torch.inference_mode():
            hyps = self.search.search(self.ens, src_tokens, src_lengths, need_attn=need_attn, **given(constraints))
        self.seconds += time.perf_counter() - start
        sentences, tokens = tally(hyps, where)
        self.sentences += sentences
        self.tokens += tokens
        return hyps

    def translate_stream(self, batches: Iterable[SourceBatch], need_attn: bool = False,
                         where: Callable[[int], str] = lambda i: f"sentence {i}",
                         constraints: Optional[ConstraintMap] = None) -> Iterator[tuple[int, list[Hypothesis]]]:
        """(sentence id, hypotheses) for every sentence of ``batches``, in the order they finish:
        the search starts waiting sentences as running ones finish (``Search.search_stream``). A
        sentence without a finite hypothesis is an error naming ``where(id)``. ``constraints``: target
        phrases per sentence id, read as each sentence starts (Search.search_stream)."""
        stream = self.search.search_stream(self.ens, batches, need_attn=need_attn, **given(constraints))
        while True:
            start = time.perf_counter()
            with torch.inference_mode():
                item = next(stream, None)
            self.seconds += time.perf_counter() - start
            if item is None:
                return
            check_finite_hypotheses(item[1], where(item[0]))
            self.sentences += 1
            self.tokens += len(item[1][0].tokens) if item[1] else 0
            yield item

    def max_source_positions(self) -> int:
        """The longest source every model of the ensemble was built for."""
        return self.ens.max_source_positions()

    def check_source_lengths(self, lengths: Sequence[int] | np.ndarray, where: Callable[[int], str],
                             fix: str = "split the sentence") -> None:
        """Refuse a source longer than every model of the ensemble was built for (its
        ``model.max_source_positions``): searching it would cost memory quadratic in its length.
        ``where(k)`` names the k-th source for the message."""
        check_lengths(lengths, self.max_source_positions(), where, "source", fix)

    def speed(self) -> str:
        return speed_line(self.sentences, self.tokens, self.seconds)


def speed_line(sentences: int, tokens: int, seconds: float) -> str:
    """nmt-generate's speed line (the search's time only)."""
    s = max(seconds, 1e-9)
    return (f"translated {sentences} sentences ({tokens} tokens) in {seconds:.1f}s "
            f"({sentences / s:.2f} sentences/s, {tokens / s:.2f} tokens/s)")


def batch_sentences(inf: InferenceConfig) -> int | None:
    """The most sentences in a batch: --batch-size, else 128 unless --max-tokens bounds the batches alone."""
    return inf.batch_size or (None if inf.max_tokens else 128)


def split_location(folder: str, split: str) -> Callable[[int], str]:
    """Names sentence k of a split in a message."""
    return lambda k: f"{folder}: split {split}, sentence {k}"


def search_for(gen: GenerationConfig, ens: EnsembleModel, data: DataDir, seed: int) -> Search:
    """The search ``gen`` configures, for these models (their decoder start, their longest output); options the
    models cannot honour are refused here, for every caller (nmt.generation.search_options)."""
    check_fits_model(gen, ens.max_target_positions(), data.tgt_dict, str(data.path / f"dict.{data.tgt}.txt"))
    start = decoder_start(ens, data.tgt_dict)
    gen = within_positions(gen, ens.max_target_positions())
    return build_search(gen, data.tgt_dict, seed=seed, decoder_start=start)


def decoder_start(ens: EnsembleModel, tgt_dict: Dictionary) -> int | None:
    """The decoder's first input symbol the models were trained with (None: the dictionary's <s>);
    models imported from fairseq start from </s> (model.decoder_start; a checkpoint written before the
    field existed gets its default, <s>, when its config is read)."""
    configs: list[ModelConfig] = [m.cfg for m in ens.models]
    symbols = {cfg.decoder_start for cfg in configs}
    if len(symbols) > 1:
        raise UsageError(f"--path: the ensemble mixes models whose decoder starts from {' and '.join(sorted(symbols))} "
                         "(nmt-trained and fairseq-imported); ensemble models of one kind")
    symbol = symbols.pop()
    return None if symbol == "<s>" else tgt_dict.index(symbol)




def first_decoder_input(ens: EnsembleModel, tgt_dict: Dictionary) -> int:
    """The id a teacher-forced pass over a hypothesis starts from: the models' decoder start, else <s>."""
    start = decoder_start(ens, tgt_dict)
    return tgt_dict.bos() if start is None else start
