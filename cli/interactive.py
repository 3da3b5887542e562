"""Translate raw sentences, one per line, from stdin or --input (nmt-interactive MODEL_DIR, or
nmt-interactive DATA --path CKPT).

Each line goes through the data-bin's tokenizer and BPE, is translated in buffered batches, and
comes out detokenized, one line per input line in input order. With --constraints a line is
fairseq's ``source<TAB>phrase<TAB>phrase``; with --glossary the glossary's terms that occur in it
are forced too; a translation that misses a phrase is named in a warning on stderr."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch

from nmt.cli.common import config_command, flag_value
from nmt.config.generate import InteractiveJob
from nmt.data.corpus_files import decoded_lines, read_lines
from nmt.errors import DataError, UsageError
from nmt.generation.constraint_input import Terms
from nmt.generation.search import Hypothesis


def _buffered(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _of_rows(where: Callable[[int], str], rows: list[int]) -> Callable[[int], str]:
    """``where`` for a batch of only ``rows`` of the lines: its j-th sentence is the line rows[j]."""
    return lambda j: where(rows[j])


def warn_unmet(terms: Optional[Terms], hyps: Optional[list[Hypothesis]], where: str) -> None:
    """A warning on stderr naming the phrases the best translation of a sentence lacks (an empty sentence, not
    searched, lacks them all)."""
    from nmt.generation.constraint_input import unmet_line, unmet_phrases

    if terms is None:
        return
    unmet = unmet_phrases(terms, hyps[0].tokens) if hyps else list(terms.texts)
    if unmet:
        print(unmet_line(where, unmet, terms), file=sys.stderr, flush=True)


def run(cfg: InteractiveJob) -> None:
    from nmt.api import searched_rows
    from nmt.data.data_bin import open_data_dir
    from nmt.data.text_pipeline import load_text_pipeline
    from nmt.engines.selection import load_engine
    from nmt.generation.constraint_input import constraint_map, split_line, with_constrained_search
    from nmt.generation.inference import pad_batch
    from nmt.generation.loading import model_and_data
    from nmt.generation.output import hypothesis_lines
    from nmt.generation.terminology import Terminology

    torch.manual_seed(cfg.common.seed)
    cfg.data, cfg.inference.path = model_and_data(cfg.data, cfg.inference.path)
    if not cfg.data:
        raise UsageError("DATA is required: a model folder (nmt-export), or the data-bin folder whose "
                         "dictionaries, tokenizer and BPE to use with --path CKPT")
    if cfg.input != "-" and not Path(cfg.input).is_file():
        raise DataError(f"--input {cfg.input}: no such file; give a file of raw sentences, one per line, "
                        "or - to read stdin")
    data = open_data_dir(cfg.data, cfg.source_lang, cfg.target_lang)
    encode = load_text_pipeline(data.path, data.src).encode
    detok = load_text_pipeline(data.path, data.tgt).decode
    gen = cfg.generation
    terminology = None
    if cfg.constraints or cfg.glossary:  # read (and checked) before the models load
        terminology = Terminology.of(data, cfg.glossary)
        named = flag_value("generation.search.name")
        gen = with_constrained_search(gen, f"--search {named}" if named else None)
    engine = load_engine(cfg.inference, data, gen, scores=cfg.verbose)
    translator = engine.translator(gen, cfg.common.seed)
    positions = engine.max_target_positions()
    shown = "stdin" if cfg.input == "-" else cfg.input
    ordered = cfg.constraints == "ordered"
    typing = cfg.input == "-" and sys.stdin.isatty()  # someone typing wants each line at once
    source = decoded_lines(sys.stdin.buffer, shown) if cfg.input == "-" else read_lines(cfg.input)
    start_id = 0

    def where(k: int) -> str:  # the k-th line of the batch being translated
        return f"{shown}: line {start_id + k + 1}"

    try:
        for lines in _buffered(source, 1 if typing else cfg.buffer_size):
            sources, phrases = zip(*(split_line(line) if cfg.constraints else (line, []) for line in lines))
            ids = [data.src_dict.encode_line(encode(text)) for text in sources]
            translator.check_source_lengths([len(i) for i in ids], where)
            terms: list[Optional[Terms]] = [None] * len(lines)
            if terminology is not None:
                terms = [terminology.terms(terminology.words(text), given, where(k), ordered=ordered)
                         for k, (text, given) in enumerate(zip(sources, phrases))]
                for k, found_terms in enumerate(terms):
                    terminology.check(found_terms, gen, positions, len(ids[k]), where(k))
            rows = searched_rows(ids)  # an empty or whitespace-only line is an empty line, not searched (nmt.api)
            results: dict[int, list] = {}
            if rows:
                src_tokens, src_lengths = pad_batch([ids[k] for k in rows], data.src_dict.pad())
                constraints = constraint_map([terms[k] for k in rows]) if terminology is not None else None
                found = translator.translate(src_tokens, src_lengths, need_attn=gen.print_alignment,
                                             where=_of_rows(where, rows), constraints=constraints)
                results = dict(zip(rows, found))
            out = []
            for k in range(len(lines)):
                sid = start_id + k
                warn_unmet(terms[k], results.get(k), where(k))
                if cfg.verbose:  # fairseq-interactive's S- line, then a C- line per forced phrase
                    out.append(f"S-{sid}\t{sources[k]}")
                    forced = terms[k]
                    out.extend(f"C-{sid}\t{text}" for text in (forced.texts if forced is not None else ()))
                if k not in results:
                    out.extend([f"H-{sid}\t0.0000\t", f"D-{sid}\t0.0000\t", f"P-{sid}\t"] if cfg.verbose else [""])
                for rank, hyp in enumerate(results.get(k, [])):
                    more, text = hypothesis_lines(sid, hyp, data.tgt_dict, detok, len(ids[k]), gen.print_alignment)
                    out.extend(more if cfg.verbose else [text] if rank == 0 else [])
            sys.stdout.write("\n".join(out) + "\n")
            sys.stdout.flush()
            start_id += len(lines)
    finally:
        source.close()
    print(translator.speed(), file=sys.stderr)


main = config_command("nmt-interactive", InteractiveJob, run, help=__doc__, arguments={"data": "data"})
