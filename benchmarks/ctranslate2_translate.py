"""Translate a BPE'd text file with CTranslate2 and print what nmt-generate prints: an ``H-`` line per
sentence and the "translated N sentences ... (X sentences/s)" line of the search time.

Imports only ``ctranslate2`` (not torch, not nmt), so that a measured process holds what a deployment
of CTranslate2 holds: the benchmarks run it by its path, not as a module of their package (whose ``__init__``
imports nmt). Each line is fed as its tokens plus ``</s>``, as nmt's encoder reads a sentence
(docs/ctranslate2.md); ``--suppress`` names tokens never produced (nmt's search rules:
``nmt.interop.ctranslate2_export.suppressed_symbols``).

    python benchmarks/ctranslate2_translate.py CT2_FOLDER test.bpe.en [--compute-type int8] [--beam 5] [--threads 2]
        [--inter-threads 1]
"""

from __future__ import annotations

import argparse  # a benchmark helper, not an nmt command: no config dataclass needed
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", help="a CTranslate2 model folder (nmt.interop.ctranslate2_export)")
    ap.add_argument("source", help="BPE'd source text, one sentence per line")
    ap.add_argument("--compute-type", default="float32")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2, help="threads per translator (intra_threads)")
    ap.add_argument("--inter-threads", type=int, default=1, help="translators running batches at once")
    ap.add_argument("--max-len", type=int, default=200, help="nmt-generate's --max-len-b")
    ap.add_argument("--suppress", nargs="*", default=["<pad>"])
    args = ap.parse_args()

    import ctranslate2

    translator = ctranslate2.Translator(args.folder, device="cpu", compute_type=args.compute_type,
                                        inter_threads=args.inter_threads, intra_threads=args.threads)
    with open(args.source, encoding="utf-8") as f:
        sources = [line.split() + ["</s>"] for line in f]
    start = time.perf_counter()
    results = translator.translate_batch(sources, max_batch_size=args.batch_size, beam_size=args.beam,
                                         max_decoding_length=args.max_len, max_input_length=0,
                                         return_scores=True, suppress_sequences=[[s] for s in args.suppress])
    seconds = time.perf_counter() - start
    for i, result in enumerate(results):
        print(f"H-{i}\t{result.scores[0]:.4f}\t{' '.join(result.hypotheses[0])}")
    print(f"translated {len(sources)} sentences with CTranslate2 {ctranslate2.__version__} ({args.compute_type}) "
          f"in {seconds:.2f}s ({len(sources) / seconds:.2f} sentences/s)", file=sys.stderr)


if __name__ == "__main__":
    main()
