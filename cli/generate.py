"""Translate a binarized split with one checkpoint or an ensemble, print fairseq's S-/T-/H-/D-/P-
lines, and score the detokenized output with sacreBLEU and the scorers --scoring adds (nmt-generate DATA
--path CKPT --scoring bleu_lc_tok).

--constraints-file (one line of tab-separated target phrases per sentence) and --glossary force terms
into the translations; a C- line names each forced phrase, and a translation that misses one is named in a
warning on stderr and counted in the summary."""

from __future__ import annotations

import contextlib
import copy
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, ContextManager, Iterable, Iterator

import numpy as np
import torch

from nmt.cli.common import config_command, flag_value
from nmt.config.generate import GenerateJob, GenerationConfig
from nmt.data.corpus_files import read_lines
from nmt.errors import DataError, UsageError
from nmt.fileio import atomic_write
from nmt.generation.constraint_input import Terms
from nmt.generation.search import Hypothesis


@contextlib.contextmanager
def _output(cfg: GenerateJob) -> Iterator[IO[str]]:
    if cfg.results_path is None:
        yield sys.stdout
        return
    from nmt.config.loader import save_config

    folder = Path(cfg.results_path)
    save_config(cfg, folder / f"generate-{cfg.gen_subset}.config.yaml")  # how to repeat the run (--config)
    with atomic_write(folder / f"generate-{cfg.gen_subset}.txt") as f:
        yield f


def _reference_file(cfg: GenerateJob, data: str, tgt: str) -> str | None:
    """--reference, else the raw text nmt-preprocess kept in DATA/raw/ (None: neither exists)."""
    from nmt.data.data_dir import kept_raw_text

    if cfg.reference:
        return cfg.reference
    kept = kept_raw_text(data, cfg.gen_subset, tgt)
    return str(kept) if kept is not None else None


def _references(path: str | None, subset: str, count: int) -> list[str] | None:
    """The raw reference lines (None: score against the decoded target side)."""
    if not path:
        return None
    if not Path(path).is_file():
        raise UsageError(f"--reference {path}: no such file; give the raw target text of the split")
    lines = list(read_lines(path))
    if len(lines) != count:
        raise DataError(f"--reference {path}: {len(lines)} lines, but split {subset} has "
                        f"{count} sentences; give the reference of that split")
    return lines


SKIP_INVALID = "--skip-invalid-size-inputs-valid-test"


def skipped_line(skipped: int, total: int, subset: str, positions: str) -> str:
    """The warning of --skip-invalid-size-inputs-valid-test: how many sentences were left out, and why
    (``positions``: the model's limits, e.g. "1024 source positions")."""
    return (f"warning: skipped {skipped} of {total} sentences of split {subset}: longer than the model's "
            f"{positions} or bigger than --max-tokens ({SKIP_INVALID}); they are not scored")


def _needs_attention(cfg: GenerateJob) -> bool:
    """Whether the search keeps each step's cross-attention: A- lines or --attention-plot use it."""
    return cfg.generation.print_alignment or bool(cfg.attention_plot)


def _start_workers(cfg: GenerateJob) -> ContextManager[Any]:
    """--workers processes, loading while this one does (each with its share of the cores unless --threads says
    how many); nothing when there is one."""
    from nmt.generation.worker_processes import GenerateWorkers
    from nmt.hardware import cores_per_process

    if cfg.workers == 1:
        return contextlib.nullcontext()
    if cfg.inference.engine not in ("auto", "torch"):
        raise UsageError(f"--workers {cfg.workers}: worker processes run the torch engine; --engine "
                         f"{cfg.inference.engine} runs in one process (give it --threads), or drop --engine")
    worker = copy.deepcopy(cfg)
    worker.inference.engine = "torch"
    if not worker.inference.threads:
        worker.inference.threads = cores_per_process(cfg.workers)
    return GenerateWorkers(worker, cfg.workers, _needs_attention(cfg))


def _forces_terms(cfg: GenerateJob) -> bool:
    """Whether the run forces terms; --constraints needs the phrases of --constraints-file (or a glossary)."""
    if cfg.constraints and not (cfg.constraints_file or cfg.glossary):
        raise UsageError("--constraints: nmt-generate reads the phrases of a binarized split from --constraints-file "
                         "FILE (one line of tab-separated phrases per sentence) or takes them from --glossary; give "
                         "one (nmt-interactive reads them after each raw sentence)")
    forced = bool(cfg.constraints_file or cfg.glossary)
    if forced and cfg.workers > 1:
        raise UsageError(f"--workers {cfg.workers}: worker processes do not force terms (--constraints-file, "
                         "--glossary); drop --workers")
    return forced


def _sentence_terms(cfg: GenerateJob, data: Any, dataset: Any, gen: GenerationConfig, positions: int,
                    where: Any) -> dict[int, Terms]:
    """The phrases each sentence of the split must contain (--constraints-file, --glossary), checked."""
    from nmt.generation.constraint_input import read_constraints_file
    from nmt.generation.terminology import Terminology

    terminology = Terminology.of(data, cfg.glossary)
    given = (read_constraints_file(cfg.constraints_file, len(dataset), cfg.gen_subset) if cfg.constraints_file
             else [[] for _ in range(len(dataset))])
    found: dict[int, Terms] = {}
    for sid in range(len(dataset)):
        source = dataset[sid]["source"]
        named = f"--constraints-file {cfg.constraints_file}:{sid + 1}" if given[sid] else where(sid)
        terms = terminology.terms(terminology.words_of_ids(source), given[sid], named,
                                  ordered=cfg.constraints == "ordered")
        if terms is not None:
            terminology.check(terms, gen, positions, len(source), named)
            found[sid] = terms
    return found


def run(cfg: GenerateJob) -> None:
    from nmt.generation.loading import refuse_model_folder_as_data

    wall = time.perf_counter()
    if not cfg.data:
        raise UsageError("DATA is required: the data-bin folder written by nmt-preprocess")
    refuse_model_folder_as_data(cfg.data, cfg.gen_subset)
    if _forces_terms(cfg):
        from nmt.generation.constraint_input import with_constrained_search

        named = flag_value("generation.search.name")
        cfg.generation = with_constrained_search(cfg.generation, f"--search {named}" if named else None)
    with _start_workers(cfg) as workers:
        _generate(cfg, workers, wall)


def _generate(cfg: GenerateJob, workers: Any, wall: float) -> None:
    """Translate and score the split (``workers``: the --workers processes, or None)."""
    from nmt.data.batching import batch_by_size
    from nmt.data.data_bin import open_data_dir
    from nmt.data.language_pair_dataset import load_language_pair
    from nmt.data.text_pipeline import load_text_pipeline
    from nmt.engines.selection import load_engine
    from nmt.generation.attention_plot import plot_cross_attention
    from nmt.generation.constraint_input import unmet_line, unmet_phrases
    from nmt.generation.guards import check_lengths
    from nmt.generation.inference import (
        batch_sentences,
        source_batches,
        speed_line,
        split_location,
    )
    from nmt.generation.output import hypothesis_lines
    from nmt.scoring import build_scorers, score_lines

    torch.manual_seed(cfg.common.seed)
    data = open_data_dir(cfg.data, cfg.source_lang, cfg.target_lang)
    scorers = build_scorers(cfg.scoring, data.tgt)  # an unknown --scoring name stops the run before translating
    folder = str(data.path)  # the first shard of a sharded DATA: the test splits are there
    dataset = load_language_pair(folder, cfg.gen_subset, data.src, data.tgt)
    detok = load_text_pipeline(folder, data.tgt).decode
    reference_file = _reference_file(cfg, folder, data.tgt)
    references = _references(reference_file, cfg.gen_subset, len(dataset))
    # what searches: this process's translator, or the --workers processes (this one then never loads the models)
    engine = None if workers else load_engine(cfg.inference, data, cfg.generation, scores=not cfg.inference.quiet)
    search: Any = engine.translator(cfg.generation, cfg.common.seed) if engine is not None else workers
    max_positions = search.max_source_positions()

    where = split_location(folder, cfg.gen_subset)
    if not cfg.skip_invalid_size_inputs_valid_test:
        check_lengths(dataset.src_sizes, max_positions, where, "source",
                      fix=f"split the sentence or pass {SKIP_INVALID} to skip such sentences")
    inf, gen = cfg.inference, cfg.generation
    terms: dict[int, Terms] = {}
    if engine is not None and (cfg.constraints_file or cfg.glossary):
        terms = _sentence_terms(cfg, data, dataset, gen, engine.max_target_positions(), where)
    unmet_sentences = unmet_total = 0
    plan = batch_by_size(dataset.src_sizes, None, max_tokens=inf.max_tokens,
                         max_sentences=batch_sentences(inf), seed=None,
                         max_source_positions=max_positions,
                         skip_invalid=cfg.skip_invalid_size_inputs_valid_test, split=cfg.gen_subset)
    need_attn = _needs_attention(cfg)
    hyps_out: dict[int, str] = {}
    refs_out: dict[int, str] = {}
    if workers:
        results: Iterable[tuple[int, list[Hypothesis]]] = workers.translate(
            np.concatenate(plan.batches) if plan.batches else np.zeros(0, dtype=np.int64))
    else:
        results = search.translate_stream(source_batches(dataset, plan.batches), need_attn=need_attn, where=where,
                                          constraints={sid: t.constraints for sid, t in terms.items()} or None)
    plot_model, plot_first = None, 0
    with _output(cfg) as out:
        for sid, hyps in results:
            sample = dataset[sid]
            src_len = len(sample["source"])
            target = data.tgt_dict.string(sample["target"])
            refs_out[sid] = references[sid] if references is not None else detok(target)
            lines = [f"S-{sid}\t{data.src_dict.string(sample['source'])}", f"T-{sid}\t{target}"]
            if sid in terms:  # fairseq-interactive's C- lines: the phrases forced
                lines += [f"C-{sid}\t{text}" for text in terms[sid].texts]
                unmet = unmet_phrases(terms[sid], hyps[0].tokens) if hyps else list(terms[sid].texts)
                if unmet:
                    print(unmet_line(where(sid), unmet, terms[sid]), file=sys.stderr, flush=True)
                    unmet_sentences, unmet_total = unmet_sentences + 1, unmet_total + len(unmet)
            for rank, hyp in enumerate(hyps):
                more, text = hypothesis_lines(sid, hyp, data.tgt_dict, detok, src_len, gen.print_alignment)
                lines += more
                if rank == 0:
                    hyps_out[sid] = text
            if cfg.attention_plot and sid < cfg.attention_plot_sentences and hyps:
                if plot_model is None:  # the searching models' torch model, or (--workers) the same loaded here
                    plot_model, plot_first = (engine or load_engine(replace(inf, engine="torch"), data)
                                              ).attention_model()
                plot_cross_attention(plot_model, sample["source"], hyps[0], data, cfg.attention_plot, sid,
                                     plot_first, cfg.attention_layer)
            if not inf.quiet:
                out.write("\n".join(lines) + "\n")
        ids = sorted(hyps_out)
        summary = [speed_line(search.sentences, search.tokens, search.seconds)]
        if terms:
            phrases = sum(len(t.texts) for t in terms.values())
            summary.append(f"constraints: {phrases - unmet_total} of {phrases} phrases met; {unmet_sentences} of "
                           f"{len(terms)} constrained sentences miss some")
        if plan.num_skipped:
            positions = f"{max_positions} source positions"
            summary.append(skipped_line(plan.num_skipped, len(dataset), cfg.gen_subset, positions))
        if ids:
            against = ("the decoded target side" if references is None
                       else f"--reference {reference_file}" if cfg.reference else reference_file)
            summary += score_lines(scorers, [hyps_out[i] for i in ids], [refs_out[i] for i in ids],
                                   f"Generate {cfg.gen_subset} with beam={gen.beam}", str(against))
        summary.append(f"total time, loading included: {time.perf_counter() - wall:.1f}s")
        out.write("\n".join(summary) + "\n")
    if cfg.results_path is not None:
        print("\n".join(summary), file=sys.stderr)


main = config_command("nmt-generate", GenerateJob, run, help=__doc__, arguments={"data": "data"})
