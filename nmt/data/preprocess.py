"""`nmt-preprocess`: parallel text -> dictionaries, BPE codes, binarized splits and metadata.json.

Everything is written into a temp folder beside ``destdir`` and renamed into place at the end, so
a failed or interrupted run leaves the destdir as it was. Passes (each parallel over byte ranges,
see ``nmt.data.binarizer``): tokenize -> learn BPE on train -> apply BPE -> build dictionaries from
train -> binarize every split. Empty lines are kept (as a sentence holding only ``</s>``) and
counted per split in metadata.json.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from nmt.config.preprocess import PreprocessConfig, PreprocessJob
from nmt.data.binarizer import FileStats, PassRunner, binarize, text_pass
from nmt.data.corpus_files import as_plain_file, check_nonempty, count_lines, find_input
from nmt.data.data_dir import (
    check_writable,
    destdir_state,
    first_data_bin,
    job_fingerprint,
    make_parents,
    move_into_place,
    new_temp_dir,
    remove_empty,
    resolve_destdir,
)
from nmt.data.data_shards import deal_lines, shard_folder_name
from nmt.data.dictionary import Dictionary
from nmt.data.indexed_dataset import FORMAT_VERSION
from nmt.data.metadata import read_metadata
from nmt.data.text_pipeline import BPE, Tokenizer, codes_file_name, plugin_options
from nmt.data.work_dirs import clean_leftovers
from nmt.errors import DataError, UsageError
from nmt.fileio import atomic_write_text
from nmt.registry import BPE as BPE_REGISTRY, TOKENIZER
from nmt.signals import sigterm_as_interrupt

METADATA_VERSION = 1


@dataclass
class Split:
    name: str  # train, valid, valid1, test, ...
    inputs: dict[str, Path]  # lang -> the user's file
    text: dict[str, Path]  # lang -> current plain text (changes after each text pass)
    raw: dict[str, Path] = field(default_factory=dict)  # lang -> the input as plain text (before any text pass)


def _langs(cfg: PreprocessConfig) -> tuple[str, str]:
    """(--source-lang, --target-lang), which _check_options has made sure are given."""
    src, tgt = cfg.source_lang, cfg.target_lang
    assert src and tgt, "_check_options first"
    return src, tgt


def _splits(cfg: PreprocessConfig) -> list[Split]:
    langs = _langs(cfg)
    out: list[Split] = []
    for kind, prefixes, option in (("train", cfg.trainpref, "--trainpref"), ("valid", cfg.validpref, "--validpref"),
                                   ("test", cfg.testpref, "--testpref")):
        if not prefixes:
            continue
        for k, prefix in enumerate(p for p in prefixes.split(",") if p):
            name = kind if k == 0 else f"{kind}{k}"
            inputs = {lang: find_input(prefix, lang, cfg.input_format, option) for lang in langs}
            out.append(Split(name, inputs, dict(inputs)))
    return out


def _check_options(cfg: PreprocessConfig) -> None:
    if not cfg.source_lang or not cfg.target_lang:
        raise UsageError("--source-lang and --target-lang are required (e.g. --source-lang en --target-lang de)")
    if cfg.source_lang == cfg.target_lang:
        raise UsageError(f"--source-lang and --target-lang are both {cfg.source_lang!r}; give two languages")
    if not (cfg.trainpref or cfg.validpref or cfg.testpref):
        raise UsageError("nothing to do: give --trainpref (and usually --validpref/--testpref)")
    if not cfg.trainpref and not (cfg.srcdict and (cfg.tgtdict or cfg.joined_dictionary)):
        raise UsageError("without --trainpref, give --srcdict and --tgtdict (or --joined-dictionary --srcdict)")
    if not cfg.trainpref and not BPE_REGISTRY.get(cfg.bpe["name"]).identity:
        raise UsageError(f"--bpe {cfg.bpe['name']} is learned on the training split: give --trainpref")
    if cfg.joined_dictionary and cfg.tgtdict:
        raise UsageError("--joined-dictionary uses --srcdict for both languages; drop --tgtdict")
    if cfg.workers < 1:
        raise UsageError(f"--workers {cfg.workers}: must be at least 1")
    if cfg.num_shards < 1:
        raise UsageError(f"--num-shards {cfg.num_shards}: must be at least 1")
    if cfg.num_shards > 1 and not cfg.trainpref:
        raise UsageError(f"--num-shards {cfg.num_shards} deals the training sentences to the shards: give --trainpref")
    for option, path in (("--srcdict", cfg.srcdict), ("--tgtdict", cfg.tgtdict)):
        if path and not Path(path).is_file():
            raise UsageError(f"{option} {path}: no such file")


def _build_dictionary(given: str | None, counts: Counter, threshold: int, nwords: int) -> Dictionary:
    if given:
        return Dictionary.load(given)
    return Dictionary.from_counts(counts, threshold=threshold, nwords=nwords)


def run_preprocess(job: PreprocessJob) -> dict[str, Any]:
    """Run the whole job; returns the metadata written (or found up to date) in destdir."""
    cfg, user_dir = job.preprocess, job.common.user_dir
    started = time.perf_counter()
    _check_options(cfg)
    tokenizer_cls, bpe_cls = TOKENIZER.get(cfg.tokenizer["name"]), BPE_REGISTRY.get(cfg.bpe["name"])
    splits = _splits(cfg)
    destdir = resolve_destdir(cfg.destdir)
    options = {k: v for k, v in asdict(cfg).items() if k not in ("workers", "overwrite", "destdir")}
    if cfg.num_shards == 1:
        del options["num_shards"]  # the data-bins written before --num-shards existed keep their fingerprint
    inputs = [p for s in splits for p in s.inputs.values()] + [Path(p) for p in (cfg.srcdict, cfg.tgtdict) if p]
    fingerprint = job_fingerprint(options, inputs, user_dir)
    state = destdir_state(destdir, fingerprint, cfg.overwrite, inputs)
    for folder, pid in clean_leftovers(destdir):
        print(f"nmt-preprocess: removed {folder}, left by an interrupted run (process {pid})")
    if state == "same":
        print(f"nmt-preprocess: {destdir} is up to date (same options and inputs); nothing to do")
        return read_metadata(first_data_bin(destdir))
    check_writable(destdir)

    with sigterm_as_interrupt():  # SIGTERM cleans up like Ctrl-C
        metas, removed, laps = _build_in_place(destdir, state, cfg, user_dir, splits, tokenizer_cls, bpe_cls,
                                              fingerprint)
    if removed:
        print(f"nmt-preprocess: --overwrite: removed the previous data-bin in {destdir} ({len(removed)} files: "
              f"{', '.join(removed[:6])}{', ...' if len(removed) > 6 else ''})")
    _print_summary(metas, destdir, time.perf_counter() - started, laps)
    return metas[0]


def _build_in_place(destdir: Path, state: str, cfg: PreprocessConfig, user_dir: str | None, splits: list[Split],
                    tokenizer_cls: type[Tokenizer[Any]], bpe_cls: type[BPE[Any]], fingerprint: str
                    ) -> tuple[list[dict[str, Any]], list[str], dict[str, float]]:
    """Build the data-bin in a temp folder beside ``destdir`` and put it in place. On any failure or
    interruption the temp folder and the parent folders made for it are removed: all is as it was.
    Returns the metadata (of each shard), the files of the data-bin it replaced, and the time of each step."""
    created = make_parents(destdir)
    tmp, runner, laps = None, None, Laps()
    try:
        tmp = new_temp_dir(destdir)
        work = tmp / ".work"
        work.mkdir()
        runner = PassRunner(cfg.workers, user_dir)
        metas = _run_in(tmp, work, cfg, user_dir, splits, runner, tokenizer_cls, bpe_cls, fingerprint, laps)
        runner.close()
        shutil.rmtree(work)
        removed = move_into_place(tmp, destdir, state)
    except BaseException:
        if runner is not None:
            runner.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        remove_empty(created)
        raise
    return metas, removed, laps.times


@dataclass
class _Run:
    """What the steps of one job share."""

    out: Path  # the first data-bin (the temp folder that becomes destdir, or its shard0)
    work: Path  # scratch space inside the temp folder, deleted before the rename
    cfg: PreprocessConfig
    splits: list[Split]
    runner: PassRunner
    laps: "Laps"
    shards: list[Path]  # every data-bin written: [out] or the shard folders (out first)

    @property
    def langs(self) -> tuple[str, str]:
        return _langs(self.cfg)

    @property
    def train(self) -> Split | None:
        return next((s for s in self.splits if s.name == "train"), None)


def _run_in(out: Path, work: Path, cfg: PreprocessConfig, user_dir: str | None, splits: list[Split],
            runner: PassRunner, tokenizer_cls: type[Tokenizer[Any]], bpe_cls: type[BPE[Any]], fingerprint: str,
            laps: "Laps") -> list[dict[str, Any]]:
    """Write the data-bin (or every shard of it) into ``out``; returns each one's metadata."""
    shards = [out] if cfg.num_shards == 1 else [out / shard_folder_name(k) for k in range(cfg.num_shards)]
    for folder in shards:
        folder.mkdir(exist_ok=True)
    run = _Run(shards[0], work, cfg, splits, runner, laps, shards)
    _check_inputs(run)
    train_counts, codes = _text_passes(run, tokenizer_cls, bpe_cls)
    dicts = _dictionaries(cfg, train_counts)
    for lang in run.langs:
        dicts[lang].save(run.out / f"dict.{lang}.txt")
    split_metas = _binarize_splits(run, dicts)
    src, tgt = run.langs
    pipeline = {"tokenizer": dict(cfg.tokenizer), "bpe": {**dict(cfg.bpe), "codes": codes},
                "user_dir": str(Path(user_dir).resolve()) if user_dir else None}
    shared = sorted({f"dict.{lang}.txt" for lang in run.langs} | set(codes.values()))
    metas = []
    for k, (folder, split_meta) in enumerate(zip(shards, split_metas)):
        for name in shared if k else ():  # every shard is a complete data-bin: the same dictionaries and codes
            shutil.copyfile(run.out / name, folder / name)
        notes = {} if len(shards) == 1 else {"shard": {"index": k, "of": len(shards)}}
        meta = data_bin_metadata(
            src, tgt, dicts, joined=cfg.joined_dictionary, pipeline=pipeline, splits=split_meta,
            fingerprint=fingerprint,
            raw_text="raw/<split>.<lang>: the untokenized input of every split but train (BLEU references)",
            empty_lines="kept: an empty line becomes a sentence holding only </s>; counted per split", **notes)
        atomic_write_text(folder / "metadata.json", json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
        metas.append(meta)
    return metas


def data_bin_metadata(src: str, tgt: str, dicts: dict[str, Any], *, joined: bool, pipeline: dict[str, Any],
                      splits: dict[str, Any], fingerprint: str, **notes: Any) -> dict[str, Any]:
    """The metadata.json of a data-bin (docs/data-format.md); ``notes`` adds keys such as
    ``raw_text`` or ``imported_from``."""
    return {
        "format_version": FORMAT_VERSION,
        "metadata_version": METADATA_VERSION,
        "source_lang": src,
        "target_lang": tgt,
        "langs": [src, tgt],
        "joined_dictionary": joined,
        "dictionaries": {lang: {"file": f"dict.{lang}.txt", "size": len(dicts[lang]),
                                "fingerprint": dicts[lang].fingerprint()} for lang in (src, tgt)},
        "pipeline": pipeline,
        **notes,
        "splits": splits,
        "job_fingerprint": fingerprint,
    }


def _check_inputs(run: _Run) -> None:
    """Plain input, not empty, the same number of lines on both sides of every split."""
    src, tgt = run.langs
    for s in run.splits:
        for lang in run.langs:
            check_nonempty(s.inputs[lang], s.inputs[lang])
            s.text[lang] = as_plain_file(s.inputs[lang], run.work)
        s.raw = dict(s.text)
        n_src, n_tgt = count_lines(s.text[src]), count_lines(s.text[tgt])
        if n_src != n_tgt:
            raise DataError(f"{s.inputs[src]} has {n_src} lines but {s.inputs[tgt]} has {n_tgt}; "
                            "the two sides of a split must be line-aligned")
    run.laps.lap("check inputs")


def _text_pass_all(run: _Run, step_for: Callable[[str], tuple], tag: str, train_counts: dict[str, Counter]) -> None:
    """Apply one text step to every split; count the training text it produces."""
    for s in run.splits:
        for lang in run.langs:
            dst = run.work / f"{s.name}.{tag}.{lang}"
            stats = text_pass(run.runner, s.text[lang], dst, str(s.inputs[lang]), step_for(lang), s is run.train,
                              run.work)
            s.text[lang] = dst
            if s is run.train:
                train_counts[lang] = stats.counts


def _text_passes(run: _Run, tokenizer_cls: type[Tokenizer[Any]], bpe_cls: type[BPE[Any]]
                 ) -> tuple[dict[str, Counter], dict[str, str]]:
    """Tokenize, learn BPE on the training text, apply it. Returns the token counts of the final
    training text (for the dictionaries) and the codes file of each language."""
    cfg, out = run.cfg, run.out
    train_counts: dict[str, Counter] = {}
    if not tokenizer_cls.identity:
        _text_pass_all(run, lambda lang: ("tokenizer", dict(cfg.tokenizer), lang), "tok", train_counts)
        run.laps.lap("tokenize")
    codes: dict[str, str] = {}
    if not bpe_cls.identity:
        if not train_counts:  # no tokenizer pass has read (and checked) the training text yet
            _count_train(run, train_counts)
        bpe_cfg = BPE_REGISTRY.options(cfg.bpe["name"], plugin_options(cfg.bpe))
        # joint codes learned on both languages with --joined-dictionary, else one file per language
        codes = {lang: codes_file_name(None if cfg.joined_dictionary else lang, bpe_cls.codes_file)
                 for lang in run.langs}
        for name in dict.fromkeys(codes.values()):
            langs = [lang for lang in run.langs if codes[lang] == name]
            if bpe_cls.learns_from_text:
                assert run.train is not None  # _check_options: a learned BPE needs --trainpref
                bpe_cls.learn_from_text(bpe_cfg, [run.train.text[lang] for lang in langs], out / name)
            else:
                bpe_cls.learn(bpe_cfg, sum((train_counts[lang] for lang in langs), Counter()), out / name)
        run.laps.lap("learn bpe")
        train_counts.clear()
        _text_pass_all(run, lambda lang: ("bpe", dict(cfg.bpe), str(out / codes[lang])), "bpe", train_counts)
        run.laps.lap("apply bpe")
    if not train_counts:
        _count_train(run, train_counts)
        run.laps.lap("count")
    return train_counts, codes


def _dictionaries(cfg: PreprocessConfig, counts: dict[str, Counter]) -> dict[str, Dictionary]:
    """From the training counts (or the given files); one shared object when joined."""
    src, tgt = _langs(cfg)
    if cfg.joined_dictionary:
        joint = counts.get(src, Counter()) + counts.get(tgt, Counter())
        d = _build_dictionary(cfg.srcdict, joint, cfg.thresholdsrc, cfg.nwordssrc)
        return {src: d, tgt: d}
    return {src: _build_dictionary(cfg.srcdict, counts.get(src, Counter()), cfg.thresholdsrc, cfg.nwordssrc),
            tgt: _build_dictionary(cfg.tgtdict, counts.get(tgt, Counter()), cfg.thresholdtgt, cfg.nwordstgt)}


def _binarize_splits(run: _Run, dicts: dict[str, Dictionary]) -> list[dict[str, Any]]:
    """Write every split's .bin/.idx (and its text with --keep-text); returns per-split stats of each
    shard. With shards, the training split is dealt to them all and the others go to the first."""
    cfg, (src, tgt) = run.cfg, run.langs
    split_metas: list[dict[str, Any]] = [{} for _ in run.shards]
    for s in run.splits:
        parts = [s.text] if s is not run.train or len(run.shards) == 1 else _deal_lines(run, s)
        for out, text, split_meta in zip(run.shards, parts, split_metas):
            split_meta[s.name] = {}
            for lang in run.langs:
                dict_file = run.out / f"dict.{src if cfg.joined_dictionary else lang}.txt"  # workers load it once
                stats = binarize(run.runner, text[lang], str(s.inputs[lang]), dict_file, dicts[lang],
                                 out / f"{s.name}.{src}-{tgt}.{lang}")
                split_meta[s.name][lang] = _split_stats(stats)
            if s is not run.train:  # the raw text: nmt-generate scores BLEU against the raw reference
                (out / "raw").mkdir(exist_ok=True)
                for lang in run.langs:
                    shutil.copyfile(s.raw[lang], out / "raw" / f"{s.name}.{lang}")
            if cfg.keep_text:
                (out / "text").mkdir(exist_ok=True)
                for lang in run.langs:
                    shutil.copyfile(text[lang], out / "text" / f"{s.name}.{lang}")
    run.laps.lap("dictionaries + binarize")
    return split_metas


def _deal_lines(run: _Run, split: Split) -> list[dict[str, Path]]:
    """The split's final text of each language dealt to the shards (:func:`deal_lines`)."""
    n = len(run.shards)
    lines = count_lines(split.text[run.langs[0]])
    if lines < n:
        raise UsageError(f"--num-shards {n}: more shards than the {lines} training sentences of "
                         f"{split.inputs[run.langs[0]]}; use fewer shards")
    parts: list[dict[str, Path]] = [{} for _ in range(n)]
    for lang in run.langs:
        paths = [run.work / f"{split.name}.{shard_folder_name(k)}.{lang}" for k in range(n)]
        deal_lines(split.text[lang], paths)
        for part, path in zip(parts, paths):
            part[lang] = path
    return parts


def _count_train(run: _Run, counts: dict[str, Counter]) -> None:
    """Token counts of the current training text (when no text pass counted them already)."""
    if run.train is None:
        return
    for lang in run.langs:
        counts[lang] = text_pass(run.runner, run.train.text[lang], None, str(run.train.inputs[lang]), None, True,
                                 run.work).counts


def _split_stats(stats: FileStats) -> dict[str, Any]:
    return {"sentences": stats.lines, "tokens": stats.tokens + stats.lines, "words": stats.tokens,
            "unk": stats.unk, "unk_rate": round(stats.unk / stats.tokens, 6) if stats.tokens else 0.0,
            "empty_lines": stats.empty}


def _print_summary(metas: list[dict[str, Any]], destdir: Path, seconds: float, laps: dict[str, float]) -> None:
    meta = metas[0]
    langs = meta["langs"]
    dicts = ", ".join(f"{lang} {meta['dictionaries'][lang]['size']} types" for lang in langs)
    print(f"nmt-preprocess: wrote {destdir} in {seconds:.1f} s; dictionaries: {dicts}"
          + (" (joined)" if meta["joined_dictionary"] else ""))
    for k, shard in enumerate(metas):
        if len(metas) > 1:
            print(f"  {shard_folder_name(k)}:")
        for split, by_lang in shard["splits"].items():
            for lang in langs:
                s = by_lang[lang]
                print(f"  {split:<8} {lang}: {s['sentences']:>9} sentences {s['tokens']:>11} tokens "
                      f"unk {100 * s['unk_rate']:.2f}%  empty lines {s['empty_lines']}")
    if len(metas) > 1:
        shards = ":".join(str(destdir / shard_folder_name(k)) for k in range(len(metas)))
        print(f"  train on the shards (epoch k reads shard (k-1) mod {len(metas)}): nmt-train {shards}")
    print("  time: " + ", ".join(f"{name} {t:.1f} s" for name, t in laps.items()))


class Laps:
    """Seconds spent in each named step, for the summary (kept out of metadata.json, which must
    not change from one run to the next)."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.times[name] = self.times.get(name, 0.0) + now - self._last
        self._last = now
