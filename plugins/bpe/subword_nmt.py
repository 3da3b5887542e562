"""`--bpe subword_nmt`: byte-pair encoding of Sennrich et al. (2016) via the subword-nmt package.

Subwords that continue into the next one end with ``@@``; decoding removes ``"@@ "``."""

from __future__ import annotations

import builtins
import contextlib
import io
import itertools
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

from nmt.data.text_pipeline import BPE
from nmt.errors import DataError
from nmt.fields import opt
from nmt.fileio import atomic_write, atomic_write_text
from nmt.registry import register_bpe

SEPARATOR = "@@"
# subword-nmt keeps the segmentation of every word it has seen: a server whose clients send new words with every
# request would grow without bound, so past this many words the cache starts again; a corpus' frequent words
# are back in it within a few lines
CACHED_WORDS = 1 << 16
# subword-nmt's learner spends most of its time in one call, max(stats, key=lambda x: (stats[x], x)): a Python
# lambda per pair per merge. In the releases listed here every keyed max() of learn_bpe.py is that call (checked in
# their source), so _fast_argmax may replace it; any other release, or a copy installed without its metadata, learns
# unpatched. tests/test_subword_nmt_learning.py checks that both ways give the same codes.
PATCHED_VERSIONS = frozenset({"0.3.8"})


def _argmax_count_then_pair(*args: Any, **kwargs: Any) -> Any:
    """``max(stats, key=lambda x: (stats[x], x))`` computed in C: the highest count, then the
    largest pair among the pairs that have it -- the same answer, so the same codes. Any other
    use of ``max`` is passed through unchanged."""
    key = kwargs.get("key")
    stats = args[0] if len(args) == 1 else None
    if key is None or len(kwargs) != 1 or not isinstance(stats, dict) or not stats:
        return builtins.max(*args, **kwargs)
    best = builtins.max(stats.values())
    return builtins.max(itertools.compress(stats, map(best.__eq__, stats.values())))


def _patchable() -> bool:
    """Whether the installed subword-nmt is a release whose learner the C argmax was checked against."""
    try:
        return metadata.version("subword-nmt") in PATCHED_VERSIONS
    except metadata.PackageNotFoundError:
        return False


@contextlib.contextmanager
def _fast_argmax() -> Iterator[bool]:
    """While it learns, subword-nmt's learn_bpe module gets the C argmax (True) if its release is one of
    PATCHED_VERSIONS; else it runs as it is (False)."""
    if not _patchable():
        yield False
        return
    from subword_nmt import learn_bpe as module

    module.max = _argmax_count_then_pair  # a module global shadows the builtin inside that module
    try:
        yield True
    finally:
        del module.max


_VERSION_LINE = "#version: 0.2"  # what learn_bpe writes first
_VERSION = re.compile(r"#version:\s+\d+(\.\d+)*\s*")
_CODES_FIX = "the codes file is damaged; re-run nmt-preprocess to learn it again"
# A merge of two NUL characters never applies (NUL is refused in every text input), and lets
# subword-nmt load codes that hold no merge at all: it refuses an empty list.
_NO_MERGE = "\x00 \x00"


def _checked_codes(path: Path) -> str:
    """The text of a codes file, checked line by line as subword-nmt will split it (which prints a
    bad line and exits the process). Nothing of the file's content goes into an error message."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start}); {_CODES_FIX}") from None
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror}); {_CODES_FIX}") from None
    lines = text.rstrip("\n").split("\n")
    header = lines[0].startswith("#version:")
    if header and not _VERSION.fullmatch(lines[0]):
        raise DataError(f"{path}: line 1 is not a \"#version: N.N\" header; {_CODES_FIX}")
    merges = lines[1:] if header else lines
    for number, line in enumerate(merges, 2 if header else 1):
        if len(line.strip("\r\n ").split(" ")) != 2:
            raise DataError(f"{path}: line {number} is not a merge (two subwords separated by one space); "
                            f"{_CODES_FIX}")
    return text if merges else f"{_VERSION_LINE}\n{_NO_MERGE}\n"


@dataclass
class SubwordNmtConfig:
    bpe_merges: int = opt(10000, "Number of BPE merge operations to learn on the training split.")
    bpe_min_frequency: int = opt(2, "Stop merging when the best pair occurs fewer times than this.")


@register_bpe("subword_nmt", config=SubwordNmtConfig, help="BPE with subword-nmt (separator @@).")
class SubwordNmtBPE(BPE[SubwordNmtConfig]):
    def __init__(self, cfg: SubwordNmtConfig, codes_path: Path | None):
        super().__init__(cfg, codes_path)
        if codes_path is None or not Path(codes_path).is_file():
            raise DataError(f"BPE codes file {codes_path} is missing; re-run nmt-preprocess to learn it")
        from subword_nmt.apply_bpe import BPE as _Apply

        codes = _checked_codes(Path(codes_path))
        # subword-nmt reports a file it cannot read by printing the line and exiting: never let that through
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                self._bpe = _Apply(io.StringIO(codes), separator=SEPARATOR)
            except (SystemExit, ValueError):
                raise DataError(f"{codes_path}: subword-nmt cannot read these BPE codes; {_CODES_FIX}") from None

    @classmethod
    def learn(cls, cfg: SubwordNmtConfig, word_counts: dict[str, int], codes_path: Path) -> None:
        from subword_nmt.learn_bpe import learn_bpe

        if cfg.bpe_merges <= 0:
            raise DataError(f"--bpe-merges {cfg.bpe_merges}: must be a positive number of merges")
        if not any(len(word) > 1 for word in word_counts):  # no pair to merge (learn_bpe fails on that)
            atomic_write_text(codes_path, f"{_VERSION_LINE}\n")
            return
        # learn_bpe reads "word count" lines when is_dict=True: our workers already counted the words
        vocab = io.StringIO("".join(f"{w} {c}\n" for w, c in sorted(word_counts.items())))
        # its tqdm bar would be the only progress output of nmt-preprocess: keep stderr for errors
        with atomic_write(codes_path) as out, contextlib.redirect_stderr(io.StringIO()), _fast_argmax():
            learn_bpe(vocab, out, cfg.bpe_merges, min_frequency=cfg.bpe_min_frequency, is_dict=True)

    def encode(self, line: str) -> str:
        if len(self._bpe.cache) > CACHED_WORDS:
            self._bpe.cache.clear()
        return self._bpe.process_line(line)

    def decode(self, line: str) -> str:
        return (line + " ").replace(SEPARATOR + " ", "").rstrip(" ")

    def continues_word(self, piece: str) -> bool:
        return piece.endswith(SEPARATOR)
