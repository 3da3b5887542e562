"""Translate raw sentences from Python with a model folder written by nmt-export (docs/python-api.md).

    python examples/python_api.py MODEL_DIR
    python examples/python_api.py MODEL_DIR "A man is riding a bike ." "Two dogs play in the snow ."
"""

from __future__ import annotations

import argparse

import nmt

SENTENCES = ["A man is riding a bike .", "Two dogs play in the snow ."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a model folder written by nmt-export")
    parser.add_argument("sentences", nargs="*", default=SENTENCES, help="raw sentences to translate")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch")
    args = parser.parse_args()

    model = nmt.load(args.model, threads=args.threads)
    print(f"model: {model.source_lang} -> {model.target_lang}, {model.parameters:,} parameters")

    # 1. best translations, detokenized, in input order
    for source, target in zip(args.sentences, model.translate(args.sentences, beam=5)):
        print(f"translation: {source} => {target}")

    # 2. the detailed form: 2 hypotheses with scores, tokens and alignments, and the cross-attention
    detailed = model.translate_detailed(args.sentences[:1], beam=5, nbest=2, alignment=True, attention=True)[0]
    print(f"source tokens: {' '.join(detailed.source_tokens)}")
    for rank, hyp in enumerate(detailed.hypotheses):
        pairs = " ".join(f"{s}-{t}" for s, t in hyp.alignment or [])
        print(f"hypothesis {rank}: score {hyp.score:.4f} | {hyp.text} | tokens {' '.join(hyp.tokens)} | "
              f"alignment {pairs}")
    assert detailed.attention is not None
    layers, heads, target_len, source_len = detailed.attention.shape
    print(f"attention shape: {layers} layers x {heads} heads x {target_len} target x {source_len} source tokens "
          "(</s> included)")


if __name__ == "__main__":
    main()
