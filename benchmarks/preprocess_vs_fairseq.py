"""nmt-preprocess against fairseq's recipe on the same raw text: total time and peak memory.

Both start from the same raw parallel text and end with a binarized data-bin: Moses tokenization, joint BPE with
subword-nmt (the same number of merges, learned on the training split), a joined dictionary, 2 workers wherever
a step can use them. One difference: sacremoses' command line escapes ``& < > " ' [ ]`` as XML entities (its
``-x`` flag defaults to on), nmt does not, so the BPE texts differ there (the dictionaries by ~0.2% of types).

- nmt: one command, ``nmt-preprocess --tokenizer moses --bpe subword_nmt --joined-dictionary --workers 2``; then
  binarizing alone, the same command on the BPE text it kept (``--repeats`` times): the job fairseq-preprocess
  does in fairseq's recipe.
- fairseq: the recipe of its ``examples/translation`` scripts, each step with its own workers: ``sacremoses -j 2
  tokenize`` per file, ``cat`` of the tokenized training text, ``subword_nmt.learn_bpe --num-workers 2``,
  ``subword_nmt.apply_bpe --num-workers 2`` per file, then ``fairseq-preprocess --joined-dictionary --workers 2``
  (in the venv of ``../shared/tools/peer_fairseq.sh install``; skipped when there is none).

Each step is a fresh process tree measured by ``measure_process`` (wall, CPU, peak RSS of the largest process and
of the whole tree). Run nothing else heavy meanwhile. The data-bins stay in ``--work`` when it is given
(WORK/nmt-bin, WORK/fairseq-bin: train_startup_vs_fairseq's inputs).

    python -m benchmarks run make_large_corpus --pairs 1000000 --out /tmp/c1m
    python -m benchmarks run preprocess_vs_fairseq --corpus /tmp/c1m --work /tmp/pp1m
    python -m benchmarks run preprocess_vs_fairseq --corpus ../shared/data/multi30k --valid val --test test_2016_flickr
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks import add_fairseq_venv_argument, existing, fairseq_venv
from benchmarks.measure_process import Measured, measure
from nmt.errors import UsageError

SPLITS = ("train", "valid", "test")


def corpus_file(corpus: Path, prefix: str, lang: str) -> Path:
    """``PREFIX.LANG`` or ``PREFIX.LANG.gz`` in the corpus folder (as nmt-preprocess finds them)."""
    for path in (corpus / f"{prefix}.{lang}", corpus / f"{prefix}.{lang}.gz"):
        if path.is_file():
            return path
    raise UsageError(f"--corpus {corpus}: no {prefix}.{lang} (or .gz) there; name the split's files with "
                     "--train/--valid/--test")


def nmt_preprocess(prefixes: dict[str, Path], dest: Path, langs: tuple[str, str], *extra: str) -> list[str]:
    return [sys.executable, "-m", "nmt.cli.preprocess", "--source-lang", langs[0], "--target-lang", langs[1],
            *(arg for split, prefix in prefixes.items() for arg in (f"--{split}pref", str(prefix))),
            "--destdir", str(dest), "--joined-dictionary", "--workers", "2", "--no-progress-bar", *extra]


def fairseq_steps(files: dict[tuple[str, str], Path], work: Path, venv: Path, merges: int,
                  langs: tuple[str, str]) -> list[tuple[str, list[str]]]:
    py, text, dest = str(venv / "bin" / "python"), work / "fairseq-text", work / "fairseq-bin"
    steps = []
    for (split, lang), path in files.items():
        read = f"gzip -dc {path}" if path.suffix == ".gz" else f"cat {path}"
        steps.append((f"sacremoses tokenize {split}.{lang}",
                      ["bash", "-c", f"{read} | {py} -m sacremoses -l {lang} -j 2 tokenize > "
                                     f"{text / f'{split}.tok.{lang}'}"]))
    both = text / "train.tok.both"
    steps.append(("cat the tokenized train", ["bash", "-c", " ".join(
        ["cat", *(str(text / f"train.tok.{lang}") for lang in langs), ">", str(both)])]))
    steps.append(("subword-nmt learn_bpe", [py, "-m", "subword_nmt.learn_bpe", "-s", str(merges), "--num-workers", "2",
                                            "--input", str(both), "--output", str(text / "bpe.codes")]))
    steps += [(f"subword-nmt apply_bpe {split}.{lang}",
               [py, "-m", "subword_nmt.apply_bpe", "-c", str(text / "bpe.codes"), "--num-workers", "2",
                "--input", str(text / f"{split}.tok.{lang}"), "--output", str(text / f"{split}.bpe.{lang}")])
              for split, lang in files]
    splits = dict.fromkeys(split for split, _ in files)
    steps.append(("fairseq-preprocess", [str(venv / "bin" / "fairseq-preprocess"), "--source-lang", langs[0],
                                         "--target-lang", langs[1], "--joined-dictionary", "--workers", "2",
                                         "--destdir", str(dest),
                                         *(arg for split in splits for arg in (f"--{split}pref",
                                                                               str(text / f"{split}.bpe")))]))
    return steps


def total(parts: list[Measured]) -> Measured:
    """Steps run one after another: times add up, the peak is the largest step's."""
    return Measured(sum(p.wall_s for p in parts), max(p.largest_mb for p in parts), max(p.tree_mb for p in parts),
                    sum(p.cpu_s for p in parts))


def run_nmt(prefixes: dict[str, Path], work: Path, merges: int, repeats: int,
            langs: tuple[str, str]) -> tuple[Measured, float]:
    """nmt's pipeline, then binarizing its BPE text alone: prints both; returns the pipeline's figures and the
    median seconds of binarizing alone."""
    dest = work / "nmt-bin"
    shutil.rmtree(dest, ignore_errors=True)
    log = work / "nmt-preprocess.log"
    full = measure(nmt_preprocess(prefixes, dest, langs, "--tokenizer", "moses", "--bpe", "subword_nmt",
                                  "--bpe-merges", str(merges), "--keep-text"), stdout=log)
    laps = next((line.strip() for line in log.read_text().splitlines() if line.strip().startswith("time:")), "")
    meta = json.loads((dest / "metadata.json").read_text())
    print(f"nmt-preprocess, Moses + BPE + binarize   {full}\n  ({laps}; dictionary "
          f"{meta['dictionaries'][langs[0]]['size'] if 'dictionaries' in meta else '?'} types)", flush=True)
    text = {split: dest / "text" / split for split in prefixes}
    alone = []
    for k in range(repeats):
        again = work / f"nmt-binarize-{k}"
        alone.append(measure(nmt_preprocess(text, again, langs)))
        same = all((again / f).read_bytes() == (dest / f).read_bytes()
                   for f in (f"dict.{langs[0]}.txt", f"train.{langs[0]}-{langs[1]}.{langs[0]}.bin"))
        shutil.rmtree(again)
    wall = statistics.median(m.wall_s for m in alone)
    print(f"nmt-preprocess, binarizing the BPE text alone: median wall {wall:.2f} s of "
          f"{', '.join(f'{m.wall_s:.2f}' for m in alone)}; {alone[-1]}; output identical to the pipeline's: {same}",
          flush=True)
    return full, wall


def main(argv: list[str]) -> str:
    ap = argparse.ArgumentParser(prog="preprocess_vs_fairseq", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="folder of raw parallel text: TRAIN.SRC, TRAIN.TGT, ... (plain "
                    "or .gz), e.g. make_large_corpus's output or ../shared/data/multi30k")
    ap.add_argument("--train", default="train", help="the training split's file prefix [default: %(default)s]")
    ap.add_argument("--valid", default="valid", help="the validation split's prefix; '' for none [default: "
                    "%(default)s; Multi30k: val]")
    ap.add_argument("--test", default="test", help="the test split's prefix; '' for none [default: %(default)s; "
                    "Multi30k: test_2016_flickr]")
    ap.add_argument("--source-lang", default="en")
    ap.add_argument("--target-lang", default="de")
    ap.add_argument("--work", help="folder for both tools' outputs, kept (needs ~4x the corpus) [default: a "
                    "temporary folder, removed]")
    add_fairseq_venv_argument(ap)
    ap.add_argument("--merges", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=3, help="runs of nmt's binarizing alone (the median is shown)")
    ap.add_argument("--only", choices=("nmt", "fairseq"))
    args = ap.parse_args(argv)
    corpus = existing(args.corpus, "--corpus", "make_large_corpus writes one")
    langs = (args.source_lang, args.target_lang)
    named = {split: prefix for split, prefix in zip(SPLITS, (args.train, args.valid, args.test)) if prefix}
    files = {(split, lang): corpus_file(corpus, prefix, lang) for split, prefix in named.items() for lang in langs}
    venv = None if args.only == "nmt" else fairseq_venv(args.fairseq_venv, "fairseq-preprocess")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        print(f"corpus {corpus}: splits {', '.join(named.values())}; {args.merges} merges; 2 workers", flush=True)
        figures, ours = [], None
        if args.only != "fairseq":
            ours, alone = run_nmt({split: corpus / prefix for split, prefix in named.items()}, work, args.merges,
                                  max(1, args.repeats), langs)
            figures.append(f"nmt pipeline {ours.wall_s:.1f} s, {ours.tree_mb:,.0f} MB; binarizing alone {alone:.2f} s")
        if venv is None and args.only != "nmt":
            print("fairseq: no venv (--fairseq-venv; ../shared/tools/peer_fairseq.sh install): its side is skipped")
        elif venv is not None:
            for name in ("fairseq-text", "fairseq-bin"):
                shutil.rmtree(work / name, ignore_errors=True)
            (work / "fairseq-text").mkdir(parents=True)
            steps = []
            for name, cmd in fairseq_steps(files, work, venv, args.merges, langs):
                steps.append(measure(cmd))
                print(f"  fairseq {name:<34} {steps[-1]}", flush=True)
            recipe = total(steps)
            print(f"fairseq recipe, total                    {recipe}", flush=True)
            figures.append(f"fairseq recipe {recipe.wall_s:.1f} s, {recipe.tree_mb:,.0f} MB "
                           f"(fairseq-preprocess alone {steps[-1].wall_s:.2f} s)")
            if ours is not None:
                print(f"nmt / fairseq: time {ours.wall_s / recipe.wall_s:.2f}x (goal <= 0.5), peak RSS largest process "
                      f"{ours.largest_mb / recipe.largest_mb:.2f}x, process tree {ours.tree_mb / recipe.tree_mb:.2f}x "
                      "(goal <= 1)")
                figures.append(f"nmt / fairseq time {ours.wall_s / recipe.wall_s:.2f}x, "
                               f"memory {ours.tree_mb / recipe.tree_mb:.2f}x")
    return "; ".join(figures)
