"""How long one sentence alone takes (what a server mostly sees) with each recipe's model: the latency half of the
quality/latency table in docs/recipes.md (the recipe search gives the BLEU half).

Each ``--path LABEL=CKPT`` is exported to a model folder (``nmt-export``, with the engines of ``--with``) and loaded
in this process with ``nmt.load(folder, engine=E)`` for every engine of ``--engines``; it translates raw sentences of
12-14 words one at a time (median and 90th percentile over ``--count``, after 5 untimed), with each beam of
``--beams``. As ../shared/tools/peer_latency.sh times the peer model, for models of nmt's own recipes.

    python -m benchmarks run recipe_latency --data BIN --path main=CKPT --path serving=CKPT2 \\
        --sentences ../shared/data/multi30k/test_2016_flickr.en.gz --with compiled --engines torch,compiled
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from benchmarks import MULTI30K, data_bin, existing, run_nmt
from nmt.errors import UsageError
from nmt.fileio import open_text

WARM_UP = 5


def lone_sentences(path: Path, count: int) -> list[str]:
    """``count`` raw sentences of 12-14 words (a typical Multi30k sentence), else the first ones of any length."""
    with open_text(path) as f:
        lines = [line.strip() for line in f if line.strip()]
    typical = [line for line in lines if 12 <= len(line.split()) <= 14]
    chosen = (typical if len(typical) >= count + WARM_UP else lines)[:count + WARM_UP]
    if not chosen:
        raise UsageError(f"--sentences {path}: no sentences; give raw source text, one sentence per line")
    return chosen


def timed(translate: Callable[[str], object], sentences: list[str]) -> tuple[float, float]:
    """(median, 90th percentile) ms of ``translate`` on each sentence alone, after WARM_UP untimed."""
    for sentence in sentences[:WARM_UP]:
        translate(sentence)
    ms = []
    for sentence in sentences[WARM_UP:] or sentences:
        start = time.perf_counter()
        translate(sentence)
        ms.append((time.perf_counter() - start) * 1000)
    ms.sort()
    return statistics.median(ms), ms[max(0, int(0.9 * len(ms)) - 1)]


def main(argv: list[str]) -> str:
    ap = argparse.ArgumentParser(prog="recipe_latency", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the data-bin the checkpoints were trained on")
    ap.add_argument("--path", action="append", required=True, metavar="LABEL=CKPT",
                    help="a recipe's checkpoint and the label its rows get (repeat for each recipe)")
    ap.add_argument("--sentences", default=str(MULTI30K / "test_2016_flickr.en.gz"),
                    help="raw source sentences, one per line (plain or .gz) [default: %(default)s]")
    ap.add_argument("--with", dest="engines_to_export", default="", help="nmt-export --with (e.g. compiled)")
    ap.add_argument("--engines", default="torch", help="comma-separated engines to time [default: %(default)s]")
    ap.add_argument("--beams", default="5,1", help="[default: %(default)s]")
    ap.add_argument("--count", type=int, default=40, help="timed sentences [default: %(default)s]")
    args = ap.parse_args(argv)
    import nmt  # after the arguments: --help does not wait for torch

    data = data_bin(args.data, "--data")
    recipes = []
    for given in args.path:
        label, sep, path = given.partition("=")
        if not sep or not label:
            raise UsageError(f"--path {given}: give LABEL=CHECKPOINT, e.g. --path main=checkpoints/m30k/best.pt")
        recipes.append((label, existing(path, "--path", "give a checkpoint trained on --data")))
    sentences = lone_sentences(existing(args.sentences, "--sentences", "give raw source sentences"), args.count)
    beams = [int(b) for b in args.beams.split(",")]
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    print(f"lone sentences ({len(sentences) - WARM_UP} timed), median / p90 ms")
    print("| recipe | engine | " + " | ".join(f"beam {b}" for b in beams) + " |")
    print("|---|---|" + "---:|" * len(beams))
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, checkpoint in recipes:
            folder = Path(tmp) / label
            export = ["--with", args.engines_to_export] if args.engines_to_export else []
            run_nmt("nmt-export", data, "--path", checkpoint, "--output", folder, *export)
            for engine in engines:
                model = nmt.load(str(folder), engine=engine)
                cells = []
                for beam in beams:

                    def translate(sentence: str, beam: int = beam) -> object:
                        return model.translate([sentence], beam=beam)  # noqa: B023 (timed before the next model)

                    median, p90 = timed(translate, sentences)
                    cells.append(f"{median:.1f} / {p90:.1f}")
                    figures.append(f"{label} {engine} beam {beam} {median:.1f} ms")
                print(f"| {label} | {engine} | " + " | ".join(cells) + " |")
    return "lone sentence, median: " + "; ".join(figures)
