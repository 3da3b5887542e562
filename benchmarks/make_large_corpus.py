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

    python benchmarks/make_large_corpus.py --pairs 5000000 --out /tmp/big   # writes train.{en,de} (plain
    # text), and Multi30k's val and test_2016_flickr as valid.{en,de} and test.{en,de}

Memory stays at the pool (~20 MB of text): rounds are written as they are made.
"""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import click
import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data"
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
    """Every (en, de) pair of SOURCES, empty lines left out."""
    pairs: list[tuple[str, str]] = []
    for folder, split in SOURCES:
        en, de = (read_lines(data / folder / f"{split}.{lang}.gz") for lang in LANGS)
        if len(en) != len(de):
            raise click.ClickException(f"{data / folder}/{split}: {len(en)} English but {len(de)} German lines")
        pairs.extend((e, d) for e, d in zip(en, de) if e.strip() and d.strip())
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


@click.command()
@click.option("--pairs", default=5_000_000, show_default=True, help="Training pairs to write.")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Folder to write (created).")
@click.option("--seed", default=1, show_default=True)
@click.option("--data", default=str(DATA), show_default=True, type=click.Path(exists=True, file_okay=False),
              help="The shared data folder.")
def main(pairs: int, out: str, seed: int, data: str) -> None:
    start = time.perf_counter()
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    source = pool(Path(data))
    written, rounds = 0, 0
    hashes: list[np.ndarray] = []  # of every English line: how many are distinct (8 bytes a line)
    files = {lang: open(folder / f"train.{lang}.partial", "w", encoding="utf-8") for lang in LANGS}
    try:
        while written < pairs:
            chunk = perturbed_round(source, np.random.default_rng([seed, rounds]))[: pairs - written]
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
            lines = read_lines(Path(data) / held / f"{prefix}.{lang}.gz")
            (folder / f"{split}.{lang}").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    distinct = np.unique(np.concatenate(hashes)).size
    click.echo(f"make_large_corpus: {written:,} training pairs in {rounds} rounds over a pool of {len(source):,} "
               f"pairs ({distinct / written:.0%} of the English lines distinct) in {folder}/train.{{en,de}}, "
               f"{time.perf_counter() - start:.0f} s; for speed and memory only, not for quality")


if __name__ == "__main__":
    main()
