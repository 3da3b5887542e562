"""How often CTranslate2, running an exported nmt model, finds nmt-generate's greedy translation.

    python benchmarks/ctranslate2_agreement.py DATA --path CKPT [--split test] [--quantization int8]
        [--batch-size 128] [--threads N] [--show 5]

Exports the checkpoint (nmt.interop.ctranslate2_export) to a temporary folder, translates the split
with ``nmt-generate --beam 1`` (fp32) and with CTranslate2's ``translate_batch(beam_size=1)`` on the
same source ids (the split's tokens, </s> included, as nmt's encoder reads them; nmt's length limit
and suppressed symbols), and prints "N/M identical (x%)" over the BPE'd hypotheses, the first
differences, and each side's sentences/s of search (one run each: for orientation, not a timing study).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import torch

from nmt.config.generate import GenerationConfig
from nmt.data.language_pair_dataset import load_language_pair
from nmt.errors import NmtError
from nmt.generation.inference import load_model, open_data_dir
from nmt.interop.ctranslate2_export import export_ctranslate2, suppressed_symbols


def nmt_greedy(data: str, path: str, split: str, batch_size: int, threads: int) -> tuple[dict[int, list[str]], str]:
    """nmt-generate --beam 1's BPE'd hypothesis of every sentence (its H- lines), and its speed line."""
    argv = [sys.executable, "-c", "from nmt.cli.generate import main; main()", data, "--path", path,
            "--gen-subset", split, "--beam", "1", "--batch-size", str(batch_size), "--threads", str(threads)]
    run = subprocess.run(argv, capture_output=True, text=True)
    if run.returncode:
        raise click.ClickException(f"nmt-generate failed: {(run.stderr.strip().splitlines() or ['?'])[-1]}")
    out = run.stdout
    hyps = {}
    for line in out.splitlines():
        if line.startswith("H-"):
            sid, _score, text = line[2:].split("\t")
            hyps[int(sid)] = text.split()
    speed = re.search(r"[0-9.]+ sentences/s", out)
    return hyps, speed.group(0) if speed else "?"


@click.command()
@click.argument("data")
@click.option("--path", required=True, help="The nmt checkpoint to export and compare.")
@click.option("--split", default="test", show_default=True)
@click.option("--quantization", default=None, help="CTranslate2 weight type (int8, float16, ...; none: float32).")
@click.option("--batch-size", default=128, show_default=True, help="Sentences per batch, both sides.")
@click.option("--threads", default=torch.get_num_threads(), show_default=True, help="Threads, both sides.")
@click.option("--show", default=3, show_default=True, help="Differences to print.")
def main(data: str, path: str, split: str, quantization: str | None, batch_size: int, threads: int,
         show: int) -> None:
    try:
        compare(data, path, split, quantization, batch_size, threads, show)
    except NmtError as e:  # a wrong path or option: one line, as nmt's commands print it
        raise click.ClickException(str(e)) from None


def compare(data: str, path: str, split: str, quantization: str | None, batch_size: int, threads: int,
            show: int) -> None:
    import ctranslate2

    pair = open_data_dir(data, None, None)
    model = load_model(path, pair.src_dict, pair.tgt_dict)
    dataset = load_language_pair(data, split, pair.src, pair.tgt)
    sources = [[pair.src_dict[i] for i in dataset[k]["source"].tolist()] for k in range(len(dataset))]
    assert all(s[-1] == "</s>" for s in sources), "a data-bin source sentence ends with </s>"
    max_len = min(GenerationConfig().max_len_b, model.max_target_positions - 1)  # nmt's limit (--max-len-a 0)

    ours, nmt_speed = nmt_greedy(data, path, split, batch_size, threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = export_ctranslate2(model, pair.src_dict, pair.tgt_dict, Path(tmp) / "ct2", quantization=quantization)
        translator = ctranslate2.Translator(str(folder), device="cpu", compute_type="default",
                                            inter_threads=1, intra_threads=threads)
        start = time.perf_counter()
        results = translator.translate_batch(sources, max_batch_size=batch_size, beam_size=1,
                                             max_decoding_length=max_len, max_input_length=0,
                                             suppress_sequences=suppressed_symbols(model.cfg.decoder_start))
        seconds = time.perf_counter() - start
    theirs = [r.hypotheses[0] for r in results]

    differ = [k for k in range(len(sources)) if ours.get(k) != theirs[k]]
    same = len(sources) - len(differ)
    print(f"{path} on {data} {split}: decoder starts from {model.cfg.decoder_start}, length limit {max_len}")
    print(f"nmt-generate --beam 1 (fp32): {nmt_speed}")
    print(f"CTranslate2 {ctranslate2.__version__} greedy ({quantization or 'float32'}): "
          f"{len(sources) / seconds:.1f} sentences/s")
    lengths = [len(h) for h in theirs]
    print(f"{same}/{len(sources)} identical ({100 * same / len(sources):.1f}%); CTranslate2's hypotheses: "
          f"{sum(lengths) / len(lengths):.1f} tokens on average, {lengths.count(max_len)} cut at the limit")
    for k in differ[:show]:
        print(f"  sentence {k}\n    nmt:         {' '.join(ours.get(k, []))}\n    CTranslate2: {' '.join(theirs[k])}")


if __name__ == "__main__":
    main()
