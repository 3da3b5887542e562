"""The configuration of `nmt-plot`: which training logs to draw, how to label them, where to save."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from nmt.config.common import CommonConfig
from nmt.fields import opt

GROUP = "plot"


@dataclass
class PlotConfig:
    """The runs to overlay and the picture to write."""

    logs: Optional[str] = opt(None, "train_log.jsonl files or run folders (--save-dir), comma separated; "
                                    "also accepted as positional arguments.", group=GROUP)
    labels: Optional[str] = opt(None, "One label per run, comma separated [default: each run's folder name].",
                                group=GROUP)
    output: str = opt("training.png", "The PNG file to write.", group=GROUP)
    valid_subset: str = opt("valid", "Which validation subset's curve to draw.", group=GROUP)
    linear_ppl: bool = opt(False, "Draw perplexity on a linear axis instead of a logarithmic one.", group=GROUP)
    title: Optional[str] = opt(None, "Title above the panels.", group=GROUP)
    dpi: int = opt(100, "Resolution of the PNG (dots per inch).", low=10, high=1200, group=GROUP)


@dataclass
class PlotJob:
    """The whole `nmt-plot` command."""

    common: CommonConfig = field(default_factory=CommonConfig)
    plot: PlotConfig = field(default_factory=PlotConfig)
