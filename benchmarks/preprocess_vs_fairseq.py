"""nmt-preprocess against fairseq's recipe on the same raw text: total time and peak memory.

Both start from the same raw parallel text (e.g. ``make_large_corpus.py``'s 1M or 5M pairs) and end
with a binarized data-bin: Moses tokenization, joint BPE with subword-nmt (the same number of merges,
learned on the training split), a joined dictionary, 2 workers wherever a step can use them. One
difference: sacremoses' command line always escapes ``& < > " ' [ ]`` as XML entities (its ``-x`` flag
defaults to on), nmt does not, so the BPE texts differ there (the dictionaries by ~0.2% of types).

- nmt: one command, ``nmt-preprocess --tokenizer moses --bpe subword_nmt --joined-dictionary --workers 2``.
- fairseq: the recipe of its ``examples/translation`` scripts, each step with its own workers:
  ``sacremoses -j 2 tokenize`` per file, ``cat`` of the tokenized training text,
  ``subword_nmt.learn_bpe --num-workers 2``, ``subword_nmt.apply_bpe --num-workers 2`` per file, then
  ``fairseq-preprocess --joined-dictionary --workers 2`` (the venv of ``../shared/tools/peer_fairseq.sh``).

Each step is a fresh process tree measured by ``measure_process`` (wall, CPU, peak RSS of the largest
process and of the whole tree). Run nothing else heavy meanwhile.

    python benchmarks/make_large_corpus.py --pairs 1000000 --out /tmp/c1m
    python benchmarks/preprocess_vs_fairseq.py --corpus /tmp/c1m --work /tmp/pp1m [--only nmt|fairseq]
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import json
import os
import shutil
import sys
from pathlib import Path

from measure_process import Measured, measure  # noqa: E402  (the benchmarks' one measuring helper)

SPLITS = ("train", "valid", "test")
LANGS = ("en", "de")
DEFAULT_VENV = Path.home() / ".cache" / "nmt-peer" / "fairseq-venv"


def run_nmt(corpus: Path, work: Path, merges: int) -> tuple[Measured, str]:
    dest = work / "nmt-bin"
    shutil.rmtree(dest, ignore_errors=True)
    log = work / "nmt-preprocess.log"
    cmd = [sys.executable, "-m", "nmt.cli.preprocess", "--source-lang", "en", "--target-lang", "de",
           *(arg for split in SPLITS for arg in (f"--{split}pref", str(corpus / split))),
           "--destdir", str(dest), "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-merges", str(merges),
           "--joined-dictionary", "--workers", "2", "--no-progress-bar"]
    got = measure(cmd, stdout=log)
    laps = next((line.strip() for line in log.read_text().splitlines() if line.strip().startswith("time:")), "")
    return got, laps


def fairseq_steps(corpus: Path, work: Path, venv: Path, merges: int) -> list[tuple[str, list[str]]]:
    py, text, dest = str(venv / "bin" / "python"), work / "fairseq-text", work / "fairseq-bin"
    steps = [(f"sacremoses tokenize {split}.{lang}",
              ["bash", "-c", f"{py} -m sacremoses -l {lang} -j 2 tokenize < {corpus / f'{split}.{lang}'} "
                             f"> {text / f'{split}.tok.{lang}'}"])
             for split in SPLITS for lang in LANGS]
    both = text / "train.tok.both"
    steps.append(("cat train.tok.{en,de}", ["bash", "-c", f"cat {text}/train.tok.en {text}/train.tok.de > {both}"]))
    steps.append(("subword-nmt learn_bpe", [py, "-m", "subword_nmt.learn_bpe", "-s", str(merges), "--num-workers", "2",
                                            "--input", str(both), "--output", str(text / "bpe.codes")]))
    steps += [(f"subword-nmt apply_bpe {split}.{lang}",
               [py, "-m", "subword_nmt.apply_bpe", "-c", str(text / "bpe.codes"), "--num-workers", "2",
                "--input", str(text / f"{split}.tok.{lang}"), "--output", str(text / f"{split}.bpe.{lang}")])
              for split in SPLITS for lang in LANGS]
    steps.append(("fairseq-preprocess", [str(venv / "bin" / "fairseq-preprocess"), "--source-lang", "en",
                                         "--target-lang", "de", "--joined-dictionary", "--workers", "2",
                                         "--destdir", str(dest),
                                         *(arg for split in SPLITS
                                           for arg in (f"--{split}pref", str(text / f"{split}.bpe")))]))
    return steps


def run_fairseq(corpus: Path, work: Path, venv: Path, merges: int) -> list[tuple[str, Measured]]:
    shutil.rmtree(work / "fairseq-text", ignore_errors=True)
    shutil.rmtree(work / "fairseq-bin", ignore_errors=True)
    (work / "fairseq-text").mkdir(parents=True)
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
    results = []
    for name, cmd in fairseq_steps(corpus, work, venv, merges):
        results.append((name, measure(cmd, env=env)))
        print(f"  fairseq {name:<34} {results[-1][1]}", flush=True)
    return results


def total(parts: list[Measured]) -> Measured:
    """Steps run one after another: times add up, the peak is the largest step's."""
    return Measured(sum(p.wall_s for p in parts), max(p.largest_mb for p in parts), max(p.tree_mb for p in parts),
                    sum(p.cpu_s for p in parts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True, help="folder with train/valid/test.{en,de} (make_large_corpus.py)")
    ap.add_argument("--work", required=True, help="scratch folder for both tools' outputs (needs ~4x the corpus)")
    ap.add_argument("--fairseq-venv", default=str(DEFAULT_VENV), help="peer_fairseq.sh install's venv")
    ap.add_argument("--merges", type=int, default=10000)
    ap.add_argument("--only", choices=("nmt", "fairseq"))
    args = ap.parse_args()
    corpus, work, venv = Path(args.corpus), Path(args.work), Path(args.fairseq_venv)
    work.mkdir(parents=True, exist_ok=True)
    with open(corpus / "train.en", "rb") as f:
        pairs = sum(1 for _ in f)
    print(f"corpus {corpus}: {pairs:,} training pairs; {args.merges} merges; 2 workers", flush=True)
    ours = fairseq = None
    if args.only != "fairseq":
        ours, laps = run_nmt(corpus, work, args.merges)
        meta = json.loads((work / "nmt-bin" / "metadata.json").read_text())
        print(f"nmt-preprocess                           {ours}\n  ({laps}; dictionary "
              f"{meta['dictionaries']['en']['size'] if 'dictionaries' in meta else '?'} types)", flush=True)
    if args.only != "nmt":
        if not (venv / "bin" / "fairseq-preprocess").exists():
            sys.exit(f"--fairseq-venv {venv}: no fairseq-preprocess there; run ../shared/tools/peer_fairseq.sh install")
        fairseq = total([m for _, m in run_fairseq(corpus, work, venv, args.merges)])
        print(f"fairseq recipe, total                    {fairseq}", flush=True)
    if ours and fairseq:
        print(f"nmt / fairseq: time {ours.wall_s / fairseq.wall_s:.2f}x (goal <= 0.5), peak RSS largest process "
              f"{ours.largest_mb / fairseq.largest_mb:.2f}x, process tree {ours.tree_mb / fairseq.tree_mb:.2f}x "
              "(goal <= 1)")


if __name__ == "__main__":
    main()
