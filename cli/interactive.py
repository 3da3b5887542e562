"""Translate raw sentences, one per line, from stdin or --input (nmt-interactive MODEL_DIR, or
nmt-interactive DATA --path CKPT).

Each line goes through the data-bin's tokenizer and BPE, is translated in buffered batches, and
comes out detokenized, one line per input line in input order."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import torch

from nmt.cli.common import config_command
from nmt.config.generate import InteractiveJob
from nmt.data.corpus_files import decoded_lines, read_lines
from nmt.errors import DataError, UsageError


def _buffered(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def run(cfg: InteractiveJob) -> None:
    from nmt.data.text_pipeline import load_text_pipeline
    from nmt.generation.inference import make_translator, model_and_data, open_data_dir, pad_batch
    from nmt.generation.output import hypothesis_lines

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
    translator = make_translator(cfg.generation, cfg.inference, data, cfg.common.seed)
    gen = cfg.generation
    shown = "stdin" if cfg.input == "-" else cfg.input
    typing = cfg.input == "-" and sys.stdin.isatty()  # someone typing wants each line at once
    source = decoded_lines(sys.stdin.buffer, shown) if cfg.input == "-" else read_lines(cfg.input)
    start_id = 0

    def where(k: int) -> str:  # the k-th line of the batch being translated
        return f"{shown}: line {start_id + k + 1}"

    try:
        for lines in _buffered(source, 1 if typing else cfg.buffer_size):
            ids = [data.src_dict.encode_line(encode(line)) for line in lines]
            translator.check_source_lengths([len(i) for i in ids], where)
            src_tokens, src_lengths = pad_batch(ids, data.src_dict.pad())
            results = translator.translate(src_tokens, src_lengths, need_attn=gen.print_alignment, where=where)
            out = []
            for k, hyps in enumerate(results):
                sid = start_id + k
                if cfg.verbose:
                    out.append(f"S-{sid}\t{lines[k]}")
                for rank, hyp in enumerate(hyps):
                    more, text = hypothesis_lines(sid, hyp, data.tgt_dict, detok, int(src_lengths[k]),
                                                  gen.print_alignment)
                    out.extend(more if cfg.verbose else [text] if rank == 0 else [])
            sys.stdout.write("\n".join(out) + "\n")
            sys.stdout.flush()
            start_id += len(lines)
    finally:
        source.close()
    print(translator.speed(), file=sys.stderr)


main = config_command("nmt-interactive", InteractiveJob, run, help=__doc__, arguments={"data": "data"})
