"""The paper's conclusion per Table 3 row, as what each variation should show against the base on each metric,
and the verdict of the measured runs on it."""

from __future__ import annotations

from dataclasses import dataclass

Verdicts = dict[str, dict[str, str]]  # variant -> metric -> better / worse / level
METRIC_LABELS = {"dev_ppl": "dev ppl", "test_bleu": "BLEU"}


@dataclass(frozen=True)
class Expect:
    """One part of a claim: each of ``names`` should be one of ``want`` (better / worse / level) on ``metric``."""
    names: tuple[str, ...]
    metric: str
    want: frozenset[str]


def _on_both(names: tuple[str, ...], want: str) -> list[Expect]:
    return [Expect(names, metric, frozenset({want})) for metric in METRIC_LABELS]


@dataclass(frozen=True)
class Claim:
    row: str
    text: str
    parts: list[Expect]

    def judge(self, verdicts: Verdicts) -> str:
        """"holds", "not measured yet", or which variations disagree with the paper, on which metric, and how."""
        checked = [(name, part.metric, verdicts[name][part.metric] in part.want)
                   for part in self.parts for name in part.names if name in verdicts]
        if not checked:
            return "not measured yet"
        misses = [f"{name} is {verdicts[name][metric]} on {METRIC_LABELS[metric]}"
                  for name, metric, agrees in checked if not agrees]
        if not misses:
            return "holds"
        said = "does not hold here" if len(misses) == len(checked) else "holds only in part"
        return f"{said} ({'; '.join(misses)})"


CLAIMS: list[Claim] = [
    Claim("A", "single-head attention is 0.9 BLEU worse than the best setting, and quality also drops off with too "
               "many heads", _on_both(("heads_1", "heads_16"), "worse")),
    Claim("B", "reducing the attention key size d_k hurts model quality",
          _on_both(("key_dim_16", "key_dim_32"), "worse")),
    Claim("C", "bigger models are better (more layers, a wider d_model or d_ff help; fewer or narrower hurt)",
          _on_both(("layers_6", "d_model_512", "ffn_2048"), "better")
          + _on_both(("layers_1", "d_model_128", "ffn_512"), "worse")),
    Claim("D", "dropout is very helpful in avoiding over-fitting (P_drop 0 is worse)",
          _on_both(("dropout_0",), "worse")),
    Claim("D", "label smoothing hurts perplexity but improves BLEU (eps_ls 0 has the better perplexity, the worse "
               "BLEU)", [Expect(("ls_0",), "dev_ppl", frozenset({"better"})),
                         Expect(("ls_0",), "test_bleu", frozenset({"worse"}))]),
    Claim("E", "learned positional embeddings give nearly identical results to the sinusoids",
          _on_both(("learned_positions",), "level")),
    Claim("attention", "additive attention is as good as dot-product attention for small d_k (section 3.2.1); "
                       "relative positions beat absolute ones (Shaw et al. 2018)",
          [Expect(("additive",), "test_bleu", frozenset({"level", "better"})),
           Expect(("relative",), "test_bleu", frozenset({"better"}))]),
    Claim("norm", "not in the paper: pre-norm trains as well as post-norm or better on small data (Nguyen & Salazar "
                  "2019, five low-resource TED pairs; it was worse on WMT'14 En-De)",
          [Expect(("pre_norm",), "test_bleu", frozenset({"level", "better"}))]),
]
