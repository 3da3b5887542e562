"""The parallel passes of preprocessing, each over byte ranges of plain text files.

* :func:`text_pass` applies one text step (tokenizer or BPE) and writes the new text, and/or
  counts its tokens (for BPE learning and dictionaries);
* :func:`binarize` turns text into a ``.bin``/``.idx`` dataset with a dictionary.

Each pass cuts every file into ``workers`` ranges, runs them in a process pool (or in-process for
one worker), and joins the per-range outputs in range order, so the output does not depend on
the number of workers. Counts are merged into a ``Counter``; dictionaries break count ties by
symbol, so their order does not depend on it either.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from nmt.data.corpus_files import RangeError, byte_ranges, iter_text_blocks
from nmt.data.dictionary import EOS, Dictionary
from nmt.data.indexed_dataset import ShardWriter, merge_shards
from nmt.data.text_pipeline import build_bpe, build_tokenizer, normalize_space
from nmt.errors import DataError


@dataclass
class RangeResult:
    lines: int = 0
    empty: int = 0
    tokens: int = 0  # words, eos not included
    unk: int = 0
    counts: Counter | None = None
    error: RangeError | None = None


@dataclass
class FileStats:
    """What one pass saw in one file."""

    lines: int = 0
    empty: int = 0
    tokens: int = 0
    unk: int = 0
    counts: Counter = field(default_factory=Counter)


# ---------------------------------------------------------------------------------------------
# worker side

_STEP_CACHE: dict[Any, Any] = {}


def _text_step(step: tuple) -> Callable[[str], str]:
    """Build (once per process) the encode function of a ("tokenizer", spec, lang) or
    ("bpe", spec, codes_path) step."""
    key = repr(step)
    if key not in _STEP_CACHE:
        kind, spec, arg = step
        obj = build_tokenizer(spec, arg) if kind == "tokenizer" else build_bpe(spec, Path(arg))
        _STEP_CACHE[key] = obj.encode
    return _STEP_CACHE[key]


def _run_text_range(task: tuple) -> RangeResult:
    path, start, end, shown, step, out_path, count = task
    counts: Counter | None = Counter() if count else None
    res = RangeResult(counts=counts)
    encode = _text_step(step) if step is not None else None
    out = open(out_path, "w", encoding="utf-8", newline="\n") if out_path else None
    try:
        for lines in iter_text_blocks(Path(path), start, end, shown):
            if encode is not None:
                lines = [normalize_space(encode(ln)) for ln in lines]
            res.lines += len(lines)
            res.empty += sum(1 for ln in lines if not ln or ln.isspace())
            text = "\n".join(lines)
            if out is not None and lines:
                out.write(text + "\n")
            if counts is not None:
                counts.update(text.split())
    except RangeError as e:
        res.error = e  # its line is counted from the range start: the driver adds earlier ranges
    finally:
        if out is not None:
            out.close()
    return res


_SENTINEL = "\x00"  # marks line ends inside one big split(); -1 in the id array, then eos
_DICT_CACHE: dict[str, tuple[Dictionary, dict[str, int]]] = {}  # path -> (dict, lookup with sentinel)


def _load_dictionary(dict_path: str, d: Dictionary | None = None) -> tuple[Dictionary, dict[str, int]]:
    if dict_path not in _DICT_CACHE:
        d = d or Dictionary.load(dict_path)
        _DICT_CACHE[dict_path] = (d, {**d.indices, _SENTINEL: -1})
    return _DICT_CACHE[dict_path]


def clear_caches() -> None:
    """Forget the tokenizers/BPE and dictionaries built for a job (its temp paths are gone)."""
    _STEP_CACHE.clear()
    _DICT_CACHE.clear()


def _run_binarize_range(task: tuple) -> RangeResult:
    path, start, end, shown, dict_path, shard_prefix = task
    d, lookup = _load_dictionary(dict_path)
    res = RangeResult()
    writer = ShardWriter(shard_prefix, d.dtype())
    try:
        for lines in iter_text_blocks(Path(path), start, end, shown):
            ids, sizes = _lines_to_ids(lines, d, lookup)
            writer.add_block(ids, sizes)
            res.lines += len(lines)
            res.empty += int((sizes == 1).sum())
            res.tokens += int(sizes.sum()) - len(lines)
            res.unk += int((ids == d.unk()).sum())
    except RangeError as e:
        res.error = e  # its line is counted from the range start: the driver adds earlier ranges
    finally:
        writer.close()
    return res


def _lines_to_ids(lines: list[str], d: Dictionary, lookup: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """(all ids with eos after each line, tokens per line incl. eos) for a block of lines.

    One ``str.split`` of the whole block and one C-level ``map`` over its words: no Python loop
    per line or per token. A line holding the sentinel as a word of its own takes the slow path."""
    text = "\n".join(lines)
    get, unk = d.indices.get, d.unk()
    if _SENTINEL in text:
        line_words = [ln.split() + [EOS] for ln in lines]
        sizes = np.fromiter(map(len, line_words), dtype=np.int64, count=len(line_words))
        flat = list(itertools.chain.from_iterable(line_words))
        return np.fromiter(map(get, flat, itertools.repeat(unk)), dtype=np.int64, count=len(flat)), sizes
    words = (text + "\n").replace("\n", f" {_SENTINEL} ").split()
    ids = np.fromiter(map(lookup.get, words, itertools.repeat(unk)), dtype=np.int64, count=len(words))
    ends = np.flatnonzero(ids == -1)  # (n_lines,)
    ids[ends] = d.eos()
    sizes = np.diff(ends, prepend=-1)  # (n_lines,) tokens per line, eos included
    return ids, sizes


# ---------------------------------------------------------------------------------------------
# driver side

def _init_worker(user_dir: str | None) -> None:
    """A pool worker: the parent handles interruptions (and ends the pool); plugins are loaded once."""
    from nmt.data.text_pipeline import TEXT_PLUGIN_KINDS
    from nmt.plugin_loader import load_plugins
    from nmt.signals import worker_signals

    worker_signals()
    load_plugins(user_dir, TEXT_PLUGIN_KINDS)


class PassRunner:
    """Runs the tasks of a pass in-process (1 worker) or in a pool kept open for the whole job."""

    def __init__(self, workers: int, user_dir: str | None):
        self.workers = max(1, workers)
        self._pool = None
        if self.workers > 1:
            from nmt.signals import workers_starting

            with workers_starting():
                self._pool = multiprocessing.get_context().Pool(self.workers, initializer=_init_worker,
                                                                initargs=(user_dir,))

    def map(self, fn: Callable[[tuple], RangeResult], tasks: list[tuple]) -> list[RangeResult]:
        if self._pool is None or len(tasks) == 1:
            return [fn(t) for t in tasks]
        return self._pool.map(fn, tasks, chunksize=1)

    def close(self) -> None:
        clear_caches()
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


def _merge(results: list[RangeResult]) -> FileStats:
    """Join per-range results in order; raise the first range's error with its absolute line."""
    stats = FileStats()
    for r in results:
        if r.error is not None:
            raise _absolute(r.error, stats.lines)
        stats.lines += r.lines
        stats.empty += r.empty
        stats.tokens += r.tokens
        stats.unk += r.unk
        if r.counts:
            stats.counts.update(r.counts)
    return stats


def _absolute(error: RangeError, lines_before: int) -> DataError:
    return DataError(error.template.format(line=lines_before + error.local_line))


def text_pass(runner: PassRunner, src: Path, dst: Path | None, shown: str, step: tuple | None,
              count: bool, tmp_dir: Path) -> FileStats:
    """Apply ``step`` to every line of ``src`` into ``dst`` (None: only count/validate)."""
    ranges = byte_ranges(src, runner.workers)
    shards = [tmp_dir / f"{dst.name}.part{k}" for k in range(len(ranges))] if dst else []
    tasks = [(str(src), a, b, shown, step, str(shards[k]) if shards else None, count)
             for k, (a, b) in enumerate(ranges)]
    stats = _merge(runner.map(_run_text_range, tasks))
    if dst is not None:
        with open(dst, "wb") as out:
            for s in shards:
                with open(s, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 22)
                os.unlink(s)
    return stats


def binarize(runner: PassRunner, src: Path, shown: str, dict_path: Path, dictionary: Dictionary,
             out_prefix: Path) -> FileStats:
    """Write ``out_prefix.bin/.idx`` for the text in ``src``; stats hold lines, words and unks."""
    ranges = byte_ranges(src, runner.workers)
    shards = [Path(f"{out_prefix}.part{k}") for k in range(len(ranges))]
    tasks = [(str(src), a, b, shown, str(dict_path), str(s)) for (a, b), s in zip(ranges, shards)]
    _load_dictionary(str(dict_path), dictionary)  # in-process workers need not read it back
    stats = _merge(runner.map(_run_binarize_range, tasks))
    merge_shards(shards, out_prefix, dictionary.dtype())
    return stats
