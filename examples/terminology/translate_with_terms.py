"""Force terms into translations from Python (docs/terminology.md): a glossary loaded with the model, a glossary
for one call, and target phrases given per sentence.

    python examples/terminology/translate_with_terms.py MODEL_DIR
"""

from __future__ import annotations

import argparse
from pathlib import Path

import nmt

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a model folder written by nmt-export")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch")
    args = parser.parse_args()

    # 1. the glossary file: its German terms go into every translation whose English sentence has their term
    model = nmt.load(args.model, glossary=HERE / "glossary.tsv", threads=args.threads)
    sentences = (HERE / "sentences.txt").read_text(encoding="utf-8").splitlines()
    for found in model.translate_detailed(sentences[1:3]):
        print(f"{found.text} (forced: {', '.join(found.constraints)})")

    # 2. more entries for one call, on top of the model's glossary
    print(model.translate("A man in a vest is sitting in a chair and holding magazines.", glossary={"chair": "Sessel"}))

    # 3. phrases per sentence, one list each (ordered=True: in this order); unmet_constraints names any it lacks
    found = model.translate_detailed(["A girl in karate uniform breaking a stick with a front kick."],
                                     constraints=[["Karateanzug", "Brett"]], ordered=True)[0]
    print(f"{found.text} (unmet: {found.unmet_constraints})")


if __name__ == "__main__":
    main()
