"""When a variation differs from the base: by more than the base's seed spread, and for BLEU also by sacreBLEU's
paired bootstrap of the two runs' translations (two seeds underestimate the noise, and the test set's own sampling
noise is larger)."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean
from typing import Optional

from studies.ablations.job import AblationJob
from studies.ablations.translations import hypotheses
from studies.record import Table

SIGNIFICANCE = 0.05


@dataclass(frozen=True)
class Figures:
    """The mean and spread (max - min) of one metric over a variant's seeds."""

    mean: float
    spread: float
    seeds: int

    @classmethod
    def of(cls, values: list[float]) -> Figures:
        return cls(mean(values), max(values) - min(values), len(values))

    def cell(self, digits: int) -> str:
        return f"{self.mean:.{digits}f}" + (f" ± {self.spread / 2:.{digits}f}" if self.seeds > 1 else "")


def figures(table: Table, name: str, metric: str) -> Optional[Figures]:
    """``metric`` over the seeds of ``name`` in the record (None: no run of it has the figure)."""
    values = [r[metric] for r in table.seeds_of(name) if r[metric] is not None]
    return Figures.of(values) if values else None


def within_noise(table: Table, name: str) -> bool:
    """Whether ``name``'s first-seed figures differ from the base's mean by no more than the base's spread
    in dev perplexity or in BLEU (so a second seed is needed to tell them apart)."""
    return "level" in compare(table, name).values()


def compare(table: Table, name: str, bleu_p: Optional[float] = None) -> dict[str, str]:
    """``name`` against the base, per metric: "better", "worse" or "level" (within the base's seed spread; for
    BLEU also when a paired bootstrap, ``bleu_p``, cannot tell the two apart at p < SIGNIFICANCE)."""
    out = {}
    for metric, lower_is_better in (("dev_ppl", True), ("test_bleu", False)):
        base, this = figures(table, "base", metric), figures(table, name, metric)
        if base is None or this is None:
            out[metric] = "?"
            continue
        delta = this.mean - base.mean
        if abs(delta) <= base.spread or (metric == "test_bleu" and bleu_p is not None and bleu_p >= SIGNIFICANCE):
            out[metric] = "level"
        else:
            out[metric] = "better" if (delta < 0) == lower_is_better else "worse"
    return out


def bleu_p_values(job: AblationJob, table: Table, names: list[str]) -> dict[str, float]:
    """Per variation, sacreBLEU's paired bootstrap (1,000 resamples of the test sentences) of its first seed
    against the base's: the p-value that its BLEU difference is resampling noise. The base's seed spread says
    how much training varies; this says how much the test set's sampling does, which on 1,000 sentences is
    ~1.6 BLEU (95% interval). A run whose translations were not kept gives the p-value its record holds
    (``bleu_p``, measured against the base of its own machine), if any."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    from nmt.data.data_dir import kept_raw_text, resolve_langs

    seed = job.common.seed
    finished = {name: table.get(f"{name}/seed{seed}") or {} for name in names if name != "base"}
    out = {name: float(r["bleu_p"]) for name, r in finished.items() if r.get("bleu_p") is not None}
    base = hypotheses(job, "base", seed)
    if base is None:
        return out
    reference = kept_raw_text(job.data, job.gen_subset, resolve_langs(job.data, None, None)[1])
    if reference is None:
        return out
    refs = reference.read_text(encoding="utf-8").splitlines()
    for name, record in finished.items():
        this = hypotheses(job, name, seed) if record else None
        if this is None or len(this) != len(base) or len(refs) != len(base):
            continue
        if this == base:  # sacreBLEU's test degenerates (p = 1 / 1,001) on identical translations
            out[name] = 1.0
            continue
        test = PairedTest([("base", base), (name, this)], {"BLEU": BLEU()}, [refs], test_type="bs", n_samples=1000)
        _signatures, results = test()
        scored = results["BLEU"][1]  # the variation's Result (sacreBLEU types the list's items as str | Result)
        if not isinstance(scored, str) and scored.p_value is not None:
            out[name] = float(scored.p_value)
    return out
