"""--compile against eager: test_2016_flickr translated several times in one process with nmt.load(...).translate.

Each pass prints its sentences/s: with --compile the first passes compile the decoder step (one variant per kind
of step they meet), and the last shows the compiled search's speed. Then the last pass's BLEU (sacreBLEU,
detokenized) and how many of its translations equal the first pass's. Run it once with and once without
--compile, taking turns, on a quiet machine (nothing else on the cores: OpenMP threads that lose their core slow
down many times over). With --compile it also prints where the compiling time went (dynamo's own phase timers:
tracing, AOTAutograd, inductor) and what the on-disk caches gave (hits, misses, bypasses), which says how much a
second process would save.

    python benchmarks/compile_speed.py --bf16 --beam 1 --compile          # the peer fairseq model, imported
    python benchmarks/compile_speed.py --bf16 --beam 1
    python benchmarks/compile_speed.py --model MODEL_DIR --bf16 --beam 5 --passes 3 --compile
"""

from __future__ import annotations

import gzip
import sys
import tempfile
import time
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_load import RAW_TEST, prepare_peer  # noqa: E402

REFERENCE = RAW_TEST.with_name("test_2016_flickr.de.gz")


def read(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


@click.command()
@click.option("--model", type=click.Path(exists=True, file_okay=False), help="A model folder [default: the peer "
              "fairseq Multi30k model, imported and exported into a temporary folder].")
@click.option("--beam", default=5, show_default=True)
@click.option("--batch-size", default=128, show_default=True)
@click.option("--threads", default=2, show_default=True)
@click.option("--bf16", is_flag=True, help="bfloat16 weights (nmt-generate --bf16).")
@click.option("--compile", "compile_step", is_flag=True, help="Compile the decoder step (nmt-generate --compile).")
@click.option("--passes", default=2, show_default=True, help="Translations of the test set in this process.")
def main(model: str | None, beam: int, batch_size: int, threads: int, bf16: bool, compile_step: bool,
         passes: int) -> None:
    import sacrebleu

    import nmt

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(model) if model else prepare_peer(Path(tmp))[0]
        loaded = nmt.load(str(folder), bf16=bf16, compile=compile_step, threads=threads)
        sources = read(RAW_TEST)
        print(f"beam {beam}, batch {batch_size}, {threads} threads, {'bf16' if bf16 else 'fp32'}, "
              f"{'--compile' if compile_step else 'eager'}")
        outputs = []
        for k in range(passes):
            start = time.perf_counter()
            outputs.append(loaded.translate(sources, beam=beam, batch_size=batch_size))
            seconds = time.perf_counter() - start
            print(f"pass {k + 1}: {len(sources) / seconds:.1f} sentences/s ({seconds:.1f} s)", flush=True)
        bleu = sacrebleu.corpus_bleu(outputs[-1], [read(REFERENCE)])
        same = sum(a == b for a, b in zip(outputs[0], outputs[-1]))
        print(f"last pass: BLEU {bleu.score:.2f}; {same}/{len(sources)} translations as the first pass's")
        if compile_step:
            print(compile_cost())


# dynamo's phase timers worth showing (seconds summed over every compiled variant), and the counters of its caches
COMPILE_PHASES = {"_compile.compile_inner": "all of it",
                  "OutputGraph.call_user_compiler": "backend, all (AOTAutograd + inductor)",
                  "aot_collect_metadata": "AOTAutograd: tracing the graph for metadata",
                  "compile_fx_inner": "inductor: lowering, code generation, C++ build",
                  "PyCodeCache.load_by_key_path": "loading the generated modules",
                  "build_guards": "guards"}
CACHE_COUNTERS = ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass", "autograd_cache_hit",
                  "autograd_cache_miss", "autograd_cache_bypass", "unique_graphs")


def compile_cost() -> str:
    """One line per phase of torch.compile's work in this process, and its caches' counters."""
    from torch._dynamo.utils import compile_times, counters

    names, seconds = compile_times(repr="csv", aggregate=True)
    spent = dict(zip(names, seconds))
    lines = [f"compiling: {name} ({label}) {float(spent[name]):.1f} s" for name, label in COMPILE_PHASES.items()
             if name in spent]
    found = {k: v for group in ("stats", "inductor", "aot_autograd") for k, v in counters[group].items()
             if k in CACHE_COUNTERS}
    lines.append("compiled graphs and caches: " + ", ".join(f"{k} {v}" for k, v in sorted(found.items())))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
