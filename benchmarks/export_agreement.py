"""Do the exported forms of a checkpoint translate as the checkpoint does, sentence for sentence?

- The model folder (``nmt-export``): for each beam size, ``nmt-generate DATA --path CKPT`` is the reference; then
  ``nmt-generate DATA --path FOLDER`` (H- and D- lines compared) and, given ``--source`` (the split's raw text),
  ``nmt.load(FOLDER).translate`` over it (compared with the D- lines).
- CTranslate2 (when installed): the checkpoint exported by ``nmt.interop.ctranslate2_export`` translates the split's
  source ids greedily (``translate_batch(beam_size=1)``, nmt's length limit and suppressed symbols), compared token
  for token with ``nmt-generate --beam 1``'s BPE'd hypotheses (fp32); ``--quantization int8`` exports int8 weights.

Each prints "N/M identical"; the first differences are shown. Speeds are printed for orientation (one run each),
not as a timing study: generate_vs_fairseq is that.

    python -m benchmarks run export_agreement --data BIN --path CKPT [--source RAW_TEST_SOURCE] [--beams 5,1]
    python -m benchmarks run export_agreement --peer ../shared/peer/fairseq-m30k \\
        --source ../shared/data/multi30k/test_2016_flickr.en.gz
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import add_model_arguments, existing, has_ctranslate2, model_inputs, run_nmt
from nmt.fileio import open_text

LINE = re.compile(r"^([HD])-(\d+)\t[^\t]*\t(.*)$", re.M)


def lines(output: str, kind: str) -> dict[int, str]:
    """Sentence id -> the (first) ``kind`` line's hypothesis of an nmt-generate output."""
    found: dict[int, str] = {}
    for m in LINE.finditer(output):
        if m.group(1) == kind:
            found.setdefault(int(m.group(2)), m.group(3))
    return found


def identical(got: dict[int, str], expected: dict[int, str], show: int, what: str) -> str:
    """"N/M identical", after printing the first ``show`` sentences that differ."""
    differ = [i for i, text in expected.items() if got.get(i) != text]
    for i in differ[:show]:
        print(f"  {what}, sentence {i}\n    expected: {expected[i]}\n    got:      {got.get(i)}")
    return f"{len(expected) - len(differ)}/{len(expected)} identical"


def ctranslate2_greedy(data: Path, checkpoint: Path, split: str, quantization: str | None, batch_size: int,
                       threads: int, work: Path) -> tuple[dict[int, str], float]:
    """CTranslate2's greedy BPE'd hypothesis of every sentence of the split (fed the data-bin's source ids, </s>
    included, as nmt's encoder reads them), and its sentences/s."""
    import ctranslate2

    from nmt.config.generate import GenerationConfig
    from nmt.data.data_bin import open_data_dir
    from nmt.data.language_pair_dataset import load_language_pair
    from nmt.generation.loading import load_model
    from nmt.interop.ctranslate2_export import export_ctranslate2, suppressed_symbols

    pair = open_data_dir(str(data), None, None)
    model: Any = load_model(str(checkpoint), pair.src_dict, pair.tgt_dict)  # any architecture: its cfg is read
    dataset = load_language_pair(str(data), split, pair.src, pair.tgt)
    sources = [[pair.src_dict[i] for i in dataset[k]["source"].tolist()] for k in range(len(dataset))]
    max_len = min(GenerationConfig().max_len_b, model.max_target_positions - 1)  # nmt's limit (--max-len-a 0)
    folder = export_ctranslate2(model, pair.src_dict, pair.tgt_dict, work / "ct2", quantization=quantization)
    translator = ctranslate2.Translator(str(folder), device="cpu", compute_type="default", inter_threads=1,
                                        intra_threads=threads)
    start = time.perf_counter()
    results = translator.translate_batch(sources, max_batch_size=batch_size, beam_size=1,
                                         max_decoding_length=max_len, max_input_length=0,
                                         suppress_sequences=suppressed_symbols(model.cfg.decoder_start))
    seconds = time.perf_counter() - start
    return {k: " ".join(r.hypotheses[0]) for k, r in enumerate(results)}, len(sources) / seconds


def main(argv: list[str]) -> str:
    ap = argparse.ArgumentParser(prog="export_agreement", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(ap)
    ap.add_argument("--folder", help="the model folder to check [default: nmt-export of --path, made here]")
    ap.add_argument("--source", help="the split's raw source text, one sentence per line (plain or .gz), for the "
                    "Python API; without it, the API is not checked")
    ap.add_argument("--split", default="test", help="[default: %(default)s]")
    ap.add_argument("--beams", default="5,1", help="[default: %(default)s]")
    ap.add_argument("--threads", type=int, default=1, help="[default: %(default)s]")
    ap.add_argument("--batch-size", type=int, default=128, help="CTranslate2's, sentences [default: %(default)s]")
    ap.add_argument("--quantization", default=None, help="CTranslate2 weight type (int8, float16, ...) [default: "
                    "float32]")
    ap.add_argument("--show", type=int, default=3, help="differences to print per comparison")
    args = ap.parse_args(argv)
    source = None
    if args.source:
        with open_text(existing(args.source, "--source", "give the split's raw source text")) as f:
            source = [line.rstrip("\n") for line in f]
    figures = []
    with tempfile.TemporaryDirectory(prefix="export_agreement.") as tmp:
        work = Path(tmp)
        data, checkpoint, _ = model_inputs(args.data, args.path, args.peer, work)
        folder = existing(args.folder, "--folder") if args.folder else work / "model"
        if not args.folder:
            run_nmt("nmt-export", data, "--path", checkpoint, "--output", folder)
        print(f"data-bin {data} ({args.split})\ncheckpoint {checkpoint}\nmodel folder {folder}")
        if source is None:
            print("Python API: not checked (give --source, the split's raw source text)")
        import nmt

        model = nmt.load(folder, threads=args.threads) if source is not None else None
        greedy_reference: dict[int, str] | None = None
        for beam in args.beams.split(","):
            options = ["--gen-subset", args.split, "--beam", beam, "--threads", str(args.threads)]
            reference = run_nmt("nmt-generate", data, "--path", checkpoint, *options)
            exported = run_nmt("nmt-generate", data, "--path", folder, *options)
            if beam == "1":
                greedy_reference = lines(reference, "H")
            hyps = identical(lines(exported, "H"), lines(reference, "H"), args.show, f"beam {beam} H-")
            detok = identical(lines(exported, "D"), lines(reference, "D"), args.show, f"beam {beam} D-")
            print(f"beam {beam}: nmt-generate --path FOLDER against --path CKPT: H- lines {hyps}, D- lines {detok}")
            row = f"beam {beam}: folder H- {hyps.split()[0]}, D- {detok.split()[0]}"
            if model is not None and source is not None:
                start = time.perf_counter()
                translated = model.translate(source, beam=int(beam))
                seconds = time.perf_counter() - start
                api = identical(dict(enumerate(translated)), lines(reference, "D"), args.show, f"beam {beam} API")
                print(f"beam {beam}: nmt.load(FOLDER).translate against nmt-generate --path CKPT's D- lines: {api} "
                      f"({len(source) / seconds:.1f} sentences/s)")
                row += f", API {api.split()[0]}"
            figures.append(row)
        if not has_ctranslate2():
            print("CTranslate2: not installed (pip install 'nmt[ctranslate2]'): skipped")
        else:
            if greedy_reference is None:
                greedy_reference = lines(run_nmt("nmt-generate", data, "--path", checkpoint, "--gen-subset",
                                                 args.split, "--beam", "1", "--threads", str(args.threads)), "H")
            theirs, speed = ctranslate2_greedy(data, checkpoint, args.split, args.quantization, args.batch_size,
                                               args.threads, work)
            agree = identical(theirs, greedy_reference, args.show, "CTranslate2 greedy")
            print(f"CTranslate2 greedy ({args.quantization or 'float32'}) against nmt-generate --beam 1: {agree} "
                  f"({speed:.1f} sentences/s)")
            figures.append(f"CTranslate2 greedy {args.quantization or 'float32'} {agree.split()[0]}")
    return "; ".join(figures) + " identical"
