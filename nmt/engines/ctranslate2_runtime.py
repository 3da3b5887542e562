"""The ctranslate2 engine: a model folder's ``ctranslate2/`` (``nmt-export --with ctranslate2``, the folder
``--format ctranslate2`` writes) run by CTranslate2's own search, given nmt's search options and giving back nmt's
hypotheses, so that nmt-generate's output and scores, nmt-interactive and nmt-serve are unchanged.

nmt's options map onto CTranslate2's: --beam -> beam_size (--search greedy: 1), --nbest -> num_hypotheses,
--lenpen -> length_penalty, --min-len -> min_decoding_length, --no-repeat-ngram-size -> no_repeat_ngram_size, and
each sentence's output length limit (--max-len-a/-b and the model's positions, as nmt's searches compute it) ->
max_decoding_length, one call per distinct limit in a batch. What CTranslate2 cannot do the same way (sampling,
--unkpen) is refused in one line naming the option. Sources go in as the model's subword symbols ending with
</s>, as nmt's encoder reads them; <pad> (and <s>, when decoding starts from it) are never produced, as in nmt.

A hypothesis's score is CTranslate2's: nmt's rule too (the sum of log-probabilities, </s> counted, over
length**lenpen), of a distribution from which <pad> and <s> are masked before the softmax, where nmt masks them
after; a trained model gives them next to no probability, so the two agree to float precision. CTranslate2 gives
no per-token log-probabilities with a search, and scoring its outputs (``score_batch``) costs more than the
search. When the caller shows them (nmt-generate's P- lines, the API's ``positional_scores``), ``log_probs``
computes them as nmt does, in a teacher-forced pass of the folder's torch model over the outputs (about the
search's cost again), and the score from them: exactly nmt's, also for a translation that reached the length
limit, whose </s> nmt forces there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

from nmt.config.generate import GenerationConfig
from nmt.data.dictionary import Dictionary
from nmt.errors import ConfigError, UsageError
from nmt.generation.search import Hypothesis, length_limits

OTHER_ENGINES = "--engine torch (or onnxruntime, compiled) runs it"
SEARCHES = {"beam", "greedy"}  # what CTranslate2's translate_batch runs as nmt does


@dataclass
class CTranslate2Model:
    """A loaded CTranslate2 translator and what its searches need of the nmt model."""

    translator: Any  # ctranslate2.Translator
    src_dict: Dictionary
    tgt_dict: Dictionary
    max_source_positions: int
    max_target_positions: int
    decoder_start: str  # the decoder's first symbol (<s>, or </s> for a fairseq-imported model)
    compute_type: str


def compute_type(bf16: bool, quantize: str) -> str:
    """CTranslate2's compute type for nmt's precision options: int8 for --quantize int8, bfloat16 for --bf16, else
    float32; one this CPU cannot run is refused in one line."""
    import ctranslate2

    wanted = "int8" if quantize == "int8" else "bfloat16" if bf16 else "float16" if quantize == "fp16" else "float32"
    supported = set(ctranslate2.get_supported_compute_types("cpu"))
    if wanted not in supported:
        flag = "--bf16" if bf16 else f"--quantize {quantize}"
        raise UsageError(f"{flag}: the ctranslate2 engine cannot compute in {wanted} on this CPU (it can in "
                         f"{', '.join(sorted(supported))}); drop {flag}")
    return wanted


def load_ctranslate2(folder: Path, src_dict: Dictionary, tgt_dict: Dictionary, model_config: dict[str, Any], *,
                     threads: int, compute: str) -> CTranslate2Model:
    """The CTranslate2 model in ``folder`` (a model folder's ``ctranslate2/``, its files checked already) with
    ``threads`` threads; ``model_config`` is the nmt model's (its positions and decoder start)."""
    try:
        import ctranslate2
    except ImportError:
        raise UsageError("--engine ctranslate2 needs the ctranslate2 package: pip install 'nmt[ctranslate2]'") from None
    try:
        translator = ctranslate2.Translator(str(folder), device="cpu", compute_type=compute, inter_threads=1,
                                            intra_threads=threads)
    except (RuntimeError, ValueError) as e:  # a folder of another CTranslate2 version, a damaged model.bin
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"{folder}: CTranslate2 cannot load it ({first}); export it again: nmt-export --path "
                         f"{folder.parent} --with ctranslate2 --force") from None
    return CTranslate2Model(translator, src_dict, tgt_dict, int(model_config["max_source_positions"]),
                            int(model_config["max_target_positions"]),
                            str(model_config.get("decoder_start") or "<s>"), compute)


def check_options(gen: GenerationConfig) -> None:
    """Refuse, naming the option, a search CTranslate2 cannot run as nmt does."""
    name = gen.search["name"]
    if name not in SEARCHES:
        raise ConfigError(f"--search {name}: the ctranslate2 engine runs beam search and greedy decoding only; "
                          f"{OTHER_ENGINES}")
    if gen.unkpen:
        raise ConfigError(f"--unkpen {gen.unkpen:g}: the ctranslate2 engine has no unknown-word penalty; "
                          f"{OTHER_ENGINES}")


# the log-probability of each token of outputs[k] (its </s> included) after sources[k], both ids
LogProbs = Callable[[Sequence[torch.Tensor], Sequence[torch.Tensor]], list[torch.Tensor]]


class CTranslate2Search:
    """nmt's search options over a CTranslate2 model: source ids in, nmt hypotheses out. ``log_probs`` scores each
    output as nmt does (None: CTranslate2's own score, no per-token ones)."""

    def __init__(self, model: CTranslate2Model, gen: GenerationConfig, *, log_probs: Optional[LogProbs] = None):
        from nmt.interop.ctranslate2_export import suppressed_symbols

        check_options(gen)
        self.model = model
        self.gen = gen
        self.log_probs = log_probs
        greedy = gen.search["name"] == "greedy"
        self.options: dict[str, Any] = dict(
            beam_size=1 if greedy else gen.beam, num_hypotheses=1 if greedy else gen.nbest,
            length_penalty=gen.lenpen, min_decoding_length=gen.min_len,
            no_repeat_ngram_size=gen.no_repeat_ngram_size, max_input_length=0, return_scores=log_probs is None,
            suppress_sequences=suppressed_symbols(model.decoder_start))
        self._target = model.tgt_dict.indices  # symbol -> id

    def search(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> list[list[Hypothesis]]:
        """Each row of ``src_tokens`` (B, S) translated: its ``nbest`` hypotheses, best first."""
        src_dict, eos, unk = self.model.src_dict, self.model.tgt_dict.eos(), self.model.tgt_dict.unk()
        rows = [row[: int(n)] for row, n in zip(src_tokens, src_lengths)]
        sources = [[src_dict[int(i)] for i in row] for row in rows]
        limits = length_limits(self.gen, self.model.max_target_positions, src_lengths).tolist()
        found: list[list[Hypothesis]] = [[] for _ in sources]
        for limit in sorted(set(limits)):  # one call per output length limit (--max-len-a: per source length)
            chosen = [k for k, n in enumerate(limits) if n == limit]
            results = self.model.translator.translate_batch([sources[k] for k in chosen], max_decoding_length=limit,
                                                            **self.options)
            for k, result in zip(chosen, results):
                scores = result.scores or [0.0] * len(result.hypotheses)
                for words, score in zip(result.hypotheses, scores):
                    tokens = torch.tensor([self._target.get(w, unk) for w in words] + [eos], dtype=torch.long)  # (T,)
                    found[k].append(Hypothesis(tokens, float(score), torch.zeros(0)))
        if self.log_probs is not None:
            self._rescore(rows, found)
        return found

    def _rescore(self, rows: list[torch.Tensor], found: list[list[Hypothesis]]) -> None:
        """nmt's scores: each token's log-probability, and their sum over length**lenpen (</s> counted); an n-best
        list re-ranked by them."""
        assert self.log_probs is not None
        pairs = [(k, hyp) for k, hyps in enumerate(found) for hyp in hyps]
        scored = self.log_probs([rows[k] for k, _ in pairs], [hyp.tokens for _, hyp in pairs])
        for (_, hyp), positional in zip(pairs, scored):
            hyp.positional_scores = positional
            hyp.score = float(positional.sum()) / len(hyp.tokens) ** self.gen.lenpen
        for hyps in found:
            hyps.sort(key=lambda h: -h.score)
