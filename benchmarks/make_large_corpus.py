"""A large English-German corpus made here, for measuring speed and memory at scale -- NOT for quality.

Every German-English pair in ``../shared/data`` (Multi30k train, the Bible, WMT newstest 2013/2014 and
IWSLT'14 valid/test: about 78k pairs) is written again and again, each round in a new shuffled order and
lightly perturbed so that lines are not all duplicates:

- a pair is joined with the next one (both sides), with probability ``JOIN``;
- a pair whose two sides each hold exactly one ", " is split there into two pairs, with probability ``SPLIT``;
- two neighbouring words swap places on each side, with probability ``SWAP``.

Joined, split and swapped lines are no longer good translations of each other, and every sentence recurs
dozens of times: a model trained on this learns little. What it gives is a corpus of a real user's size
(WMT14 en-de has 4.5M pairs) with a real vocabulary and length distribution, the same for every run
(seeded), for timing nmt-preprocess, training start-up and data loading against fairseq.

    python -m benchmarks run make_large_corpus --pairs 5000000 --out /tmp/big   # writes train.{en,de} (plain
    # text), and Multi30k's val and test_2016_flickr as valid.{en,de} and test.{en,de}

Memory stays at the pool (~20 MB of text): rounds are written as they are made. A source missing from ``--data`` is
left out (with a line saying so); Multi30k's val and test_2016_flickr must be there.
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import gzip
import time
from pathlib import Path

import numpy as np

from benchmarks import SHARED, existing
from nmt.errors import DataError, UsageError

DATA = SHARED / "data"
SOURCES = [  # (folder, split prefix): German-English pairs, line i of .de and .en aligned
    ("multi30k", "train"), ("bible", "train"), ("bible", "valid"), ("wmt-newstest-de-en", "valid"),
    ("wmt-newstest-de-en", "test"), ("iwslt14-de-en", "valid"), ("iwslt14-de-en", "test"),
]
HELD_OUT = {"valid": ("multi30k", "val"), "test": ("multi30k", "test_2016_flickr")}
JOIN, SPLIT, SWAP = 0.15, 0.5, 0.3
LANGS = ("en", "de")


def read_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def pool(data: Path) -> list[tuple[str, str]]:
    """Every (en, de) pair of the SOURCES found in ``data``, empty lines left out."""
    pairs: list[tuple[str, str]] = []
    for folder, split in SOURCES:
        files = [data / folder / f"{split}.{lang}.gz" for lang in LANGS]
        if not all(f.is_file() for f in files):
            print(f"make_large_corpus: {data / folder}/{split}.{{en,de}}.gz not found: left out")
            continue
        en, de = (read_lines(f) for f in files)
        if len(en) != len(de):
            raise DataError(f"{data / folder}/{split}: {len(en)} English but {len(de)} German lines")
        pairs.extend((e, d) for e, d in zip(en, de) if e.strip() and d.strip())
    if not pairs:
        raise UsageError(f"--data {data}: none of the sources is there ({', '.join(f'{f}/{s}' for f, s in SOURCES)})")
    return pairs


def swapped(line: str, rng: np.random.Generator) -> str:
    words = line.split(" ")
    if len(words) < 2:
        return line
    i = int(rng.integers(len(words) - 1))
    words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words)


def perturbed_round(pairs: list[tuple[str, str]], rng: np.random.Generator) -> list[tuple[str, str]]:
    """One pass over ``pairs`` in a shuffled order, joined / split / swapped as the module says."""
    order = rng.permutation(len(pairs))
    draws = rng.random((len(pairs), 4))  # join, split, swap en, swap de
    out: list[tuple[str, str]] = []
    skip = False
    for k, i in enumerate(order):
        if skip:
            skip = False
            continue
        en, de = pairs[i]
        join, split, swap_en, swap_de = draws[k]
        if join < JOIN and k + 1 < len(order):
            nxt = pairs[order[k + 1]]
            en, de, skip = f"{en} {nxt[0]}", f"{de} {nxt[1]}", True
        if swap_en < SWAP:
            en = swapped(en, rng)
        if swap_de < SWAP:
            de = swapped(de, rng)
        if split < SPLIT and en.count(", ") == 1 and de.count(", ") == 1:
            (en1, en2), (de1, de2) = en.split(", "), de.split(", ")
            if en1 and en2 and de1 and de2:
                out.extend([(en1, de1), (en2, de2)])
                continue
        out.append((en, de))
    return out


def main(argv: list[str]) -> str:
    ap = argparse.ArgumentParser(prog="make_large_corpus", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5_000_000, help="training pairs to write [default: %(default)s]")
    ap.add_argument("--out", required=True, help="folder to write (created)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=str(DATA), help="the shared data folder [default: %(default)s]")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    data = existing(args.data, "--data", "the shared data folder (Multi30k, Bible, WMT newstest, IWSLT'14)")
    for split, (held, prefix) in HELD_OUT.items():
        for lang in LANGS:
            existing(data / held / f"{prefix}.{lang}.gz", "--data", f"the {split} split comes from it")
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    source = pool(data)
    written, rounds = 0, 0
    hashes: list[np.ndarray] = []  # of every English line: how many are distinct (8 bytes a line)
    files = {lang: open(folder / f"train.{lang}.partial", "w", encoding="utf-8") for lang in LANGS}
    try:
        while written < args.pairs:
            chunk = perturbed_round(source, np.random.default_rng([args.seed, rounds]))[: args.pairs - written]
            files["en"].write("".join(f"{en}\n" for en, _ in chunk))
            files["de"].write("".join(f"{de}\n" for _, de in chunk))
            hashes.append(np.fromiter((hash(en) for en, _ in chunk), dtype=np.int64, count=len(chunk)))
            written += len(chunk)
            rounds += 1
    finally:
        for f in files.values():
            f.close()
    for lang in LANGS:  # complete files only: a killed run leaves *.partial, never a short train.LANG
        (folder / f"train.{lang}.partial").replace(folder / f"train.{lang}")
    for split, (held, prefix) in HELD_OUT.items():
        for lang in LANGS:
            lines = read_lines(data / held / f"{prefix}.{lang}.gz")
            (folder / f"{split}.{lang}").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    distinct = np.unique(np.concatenate(hashes)).size
    seconds = time.perf_counter() - start
    print(f"make_large_corpus: {written:,} training pairs in {rounds} rounds over a pool of {len(source):,} "
          f"pairs ({distinct / written:.0%} of the English lines distinct) in {folder}/train.{{en,de}}, "
          f"{seconds:.0f} s; for speed and memory only, not for quality")
    return f"{written:,} pairs in {seconds:.0f} s, {distinct / written:.0%} of the English lines distinct"
