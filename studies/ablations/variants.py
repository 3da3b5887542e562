"""The variations of the paper's Table 3 the study trains, each with the paper's figures for its nearest setting."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Paper:
    """The paper's Table 3 figures (dev newstest2013 EN-DE, 100k updates) for the nearest setting."""

    setting: str
    ppl: Optional[float] = None  # None: the paper gives no figure (a claim in the text, or not in the paper)
    bleu: Optional[float] = None

    def cell(self) -> str:
        figures = "" if self.ppl is None else f": {self.ppl:.2f} / {self.bleu:.1f}"
        return self.setting + figures


@dataclass(frozen=True)
class Variant:
    row: str  # the Table 3 row it belongs to (A-E), or the section of the text for rows the table lacks
    label: str
    flags: tuple[str, ...]  # the nmt-train flags that change the base (studies/reference.py)
    paper: Paper


def _both(flag: str, value: object) -> tuple[str, ...]:
    return f"--encoder-{flag}", str(value), f"--decoder-{flag}", str(value)


def _restricted(window: int) -> tuple[str, ...]:
    # restricted attention is self-attention only: encoder-decoder attention stays scaled dot-product
    return "--attention", "restricted", "--attention-window", str(window)


VARIANTS: dict[str, Variant] = {
    "base": Variant("base", "sinusoidal, 4 heads (d_k 64), dot-product, post-norm, P_drop 0.3, eps_ls 0.1", (),
                    Paper("base (N 6, d_model 512, 8 heads)", 4.92, 25.8)),
    "heads_1": Variant("A", "1 head (d_k 256)", _both("attention-heads", 1), Paper("1 head (d_k 512)", 5.29, 24.9)),
    "heads_8": Variant("A", "8 heads (d_k 32)", _both("attention-heads", 8), Paper("16 heads (d_k 32)", 4.91, 25.8)),
    "heads_16": Variant("A", "16 heads (d_k 16)", _both("attention-heads", 16),
                        Paper("32 heads (d_k 16)", 5.01, 25.4)),
    "key_dim_16": Variant("B", "d_k 16 (d_v 64)", ("--attention-key-dim", "16"), Paper("d_k 16", 5.16, 25.1)),
    "key_dim_32": Variant("B", "d_k 32 (d_v 64)", ("--attention-key-dim", "32"), Paper("d_k 32", 5.01, 25.4)),
    "layers_1": Variant("C", "N 1 (a third of the base)", _both("layers", 1), Paper("N 2", 6.11, 23.7)),
    "layers_6": Variant("C", "N 6", _both("layers", 6), Paper("N 8", 4.88, 25.5)),
    "d_model_128": Variant("C", "d_model 128 (d_k 32)", _both("embed-dim", 128),
                           Paper("d_model 256 (d_k 32)", 5.75, 24.5)),
    "d_model_512": Variant("C", "d_model 512 (d_k 128)", _both("embed-dim", 512),
                           Paper("d_model 1024 (d_k 128)", 4.66, 26.0)),
    "ffn_512": Variant("C", "d_ff 512", _both("ffn-embed-dim", 512), Paper("d_ff 1024", 5.12, 25.4)),
    "ffn_2048": Variant("C", "d_ff 2048", _both("ffn-embed-dim", 2048), Paper("d_ff 4096", 4.75, 26.2)),
    "dropout_0": Variant("D", "P_drop 0.0", ("--dropout", "0.0"), Paper("P_drop 0.0", 5.77, 24.6)),
    "dropout_0.1": Variant("D", "P_drop 0.1", ("--dropout", "0.1"), Paper("P_drop 0.2 (base 0.1)", 4.95, 25.5)),
    "ls_0": Variant("D", "eps_ls 0.0", ("--label-smoothing", "0.0"), Paper("eps_ls 0.0", 4.67, 25.3)),
    "ls_0.2": Variant("D", "eps_ls 0.2", ("--label-smoothing", "0.2"), Paper("eps_ls 0.2", 5.47, 25.7)),
    "learned_positions": Variant("E", "learned positional embeddings", ("--positional", "learned"),
                                 Paper("positional embedding", 4.92, 25.7)),
    "additive": Variant("attention", "additive (Bahdanau) scores", ("--attention", "additive"),
                        Paper("section 3.2.1, no figure")),
    "restricted_3": Variant("attention", "restricted self-attention, r 3", _restricted(3),
                            Paper("section 4, no figure")),
    "restricted_8": Variant("attention", "restricted self-attention, r 8", _restricted(8),
                            Paper("section 4, no figure")),
    # Shaw et al. 2018 replace the absolute positions by relative ones (keeping both gained nothing there)
    "relative": Variant("attention", "relative-position self-attention, k 16, no absolute positions",
                        ("--attention", "relative", "--max-relative-position", "16", "--positional", "none"),
                        Paper("Shaw et al. 2018, no Table 3 figure")),
    "pre_norm": Variant("norm", "pre-norm (layer norm before each sub-layer)",
                        ("--encoder-normalize-before", "--decoder-normalize-before"), Paper("not in the paper")),
}
