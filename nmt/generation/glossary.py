"""A glossary: source terms and the target terms their translation must use (``--glossary FILE``, ``glossary=``).

The file holds one entry per line, ``source term<TAB>target term``; blank lines and lines starting with ``#`` are
skipped. An entry applies to a sentence where its source term occurs: matched on the source tokenizer's words
(so "dog's" and "dog 's" are alike, as the model sees them), without regard to case or to punctuation stuck to a
word, whole words only, the longest term first where terms overlap. Its target term then becomes one more
constraint of the sentence (nmt.generation.constraint_input), each target term once.

Every entry is checked when the glossary is read, so a bad one stops the command before anything is translated:
one line naming FILE:LINE and the fix.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

import torch

from nmt.errors import DataError, UsageError
from nmt.generation.constraint_input import SEPARATOR, PhraseEncoder

Words = Callable[[str], list[str]]  # raw source text -> the source tokenizer's words


@dataclass(frozen=True)
class Entry:
    source: tuple[str, ...]  # the source term's words, as matched (match_form)
    target: str  # the target term, raw text
    ids: torch.Tensor  # (n,) its target ids
    where: str  # FILE:LINE or glossary['term'], for messages


def match_form(word: str) -> str:
    """A word as glossary matching compares it: case folded, punctuation stuck to either end dropped (unless the
    word is nothing but punctuation)."""
    folded = word.casefold()
    start, end = 0, len(folded)
    while start < end and unicodedata.category(folded[start]).startswith("P"):
        start += 1
    while end > start and unicodedata.category(folded[end - 1]).startswith("P"):
        end -= 1
    return folded[start:end] or folded


class Glossary:
    """Entries by source term; ``find(words)`` gives the target terms a sentence's words call for."""

    def __init__(self, entries: Iterable[Entry], name: str):
        self.name = name  # the file, or "glossary", for messages
        self.entries: dict[tuple[str, ...], Entry] = {}
        for entry in entries:
            self.entries[entry.source] = entry
        self._by_first: dict[str, list[Entry]] = {}
        for entry in sorted(self.entries.values(), key=lambda e: -len(e.source)):
            self._by_first.setdefault(entry.source[0], []).append(entry)

    def __len__(self) -> int:
        return len(self.entries)

    def find(self, words: list[str]) -> list[tuple[str, torch.Tensor]]:
        """(target term, its ids) of every entry whose source term occurs in ``words``, in the order they occur;
        where matches overlap, the longest source term wins (then the first)."""
        forms = [match_form(w) for w in words]
        found = []  # (start, entry)
        for i, form in enumerate(forms):
            for entry in self._by_first.get(form, ()):
                if tuple(forms[i:i + len(entry.source)]) == entry.source:
                    found.append((i, entry))
        taken = [False] * len(forms)
        kept = []
        for i, entry in sorted(found, key=lambda m: (-len(m[1].source), m[0])):
            span = range(i, i + len(entry.source))
            if not any(taken[j] for j in span):
                for j in span:
                    taken[j] = True
                kept.append((i, entry))
        seen: set[str] = set()
        out = []
        for _, entry in sorted(kept, key=lambda m: m[0]):
            if entry.target not in seen:
                seen.add(entry.target)
                out.append((entry.target, entry.ids))
        return out

    def merged(self, other: "Glossary | None") -> "Glossary":
        """This glossary with ``other``'s entries added (``other`` wins for a source term both have)."""
        if other is None or not len(other):
            return self
        return Glossary([*self.entries.values(), *other.entries.values()], f"{self.name} and {other.name}")


def _entry(source: str, target: str, where: str, words: Words, encoder: PhraseEncoder) -> Entry:
    terms = [match_form(w) for w in words(source)]
    if not terms:
        raise DataError(f"{where}: an empty source term; write 'source term<TAB>target term'")
    if not target.strip():
        raise DataError(f"{where}: an empty target term; write 'source term<TAB>target term'")
    try:
        ids = encoder.encode(target, where)
    except UsageError as e:
        raise DataError(str(e)) from None
    return Entry(tuple(terms), target.strip(), ids, where)


def _add(entries: dict[tuple[str, ...], Entry], entry: Entry) -> None:
    """Keep ``entry``, refusing a source term already given another target term."""
    old = entries.get(entry.source)
    if old is not None and old.target != entry.target:
        raise DataError(f"{entry.where}: source term {' '.join(entry.source)!r} already has the target term "
                        f"{old.target!r} ({old.where}); keep one target term per source term")
    entries.setdefault(entry.source, entry)


def read_glossary(path: str | Path, words: Words, encoder: PhraseEncoder) -> Glossary:
    """The glossary file ``path`` (--glossary): its entries checked, source terms tokenized with ``words``,
    target terms encoded with ``encoder``; a DataError naming FILE:LINE for a bad line."""
    from nmt.data.corpus_files import read_lines

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--glossary {path}: no such file; give a file of 'source term<TAB>target term' lines")
    entries: dict[tuple[str, ...], Entry] = {}
    for number, line in enumerate(read_lines(path), 1):
        line = line.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}:{number}"
        fields = line.split(SEPARATOR)
        if len(fields) != 2:
            problem = "no tab" if len(fields) == 1 else f"{len(fields) - 1} tabs"
            raise DataError(f"{where}: {problem}; write one entry per line: source term, one tab, target term")
        _add(entries, _entry(fields[0], fields[1], where, words, encoder))
    if not entries:
        raise DataError(f"{path}: no glossary entries; write one per line: source term, a tab, target term")
    return Glossary(entries.values(), str(path))


def glossary_of(mapping: Mapping[str, str], words: Words, encoder: PhraseEncoder, name: str = "glossary") -> Glossary:
    """A glossary from ``{source term: target term}`` (the Python API's and the server's), checked as a file's
    lines are; a UsageError naming ``name[term]``."""
    if not isinstance(mapping, Mapping):
        raise UsageError(f"{name}: a {type(mapping).__name__}, not a mapping of source term to target term (or a "
                         "file name)")
    entries: dict[tuple[str, ...], Entry] = {}
    for source, target in mapping.items():
        where = f"{name}[{source!r}]"
        if not isinstance(source, str) or not isinstance(target, str):
            odd = target if isinstance(source, str) else source
            raise UsageError(f"{where}: a {type(odd).__name__}; source and target terms are strings")
        try:
            _add(entries, _entry(source, target, where, words, encoder))
        except DataError as e:
            raise UsageError(str(e)) from None
    return Glossary(entries.values(), name)
