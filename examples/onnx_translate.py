"""Translate with an exported model and no PyTorch: onnxruntime, numpy and the tokenizer/BPE packages only.

    nmt-export DATA --path CKPT --output MODEL_DIR --with onnx
    python examples/onnx_translate.py MODEL_DIR [--beam 5] [--int8] < raw.en > out.de

Raw sentences on stdin, one per line; translations on stdout. The model folder has what this needs: the two graphs
in MODEL_DIR/onnx (docs/engines.md), the dictionaries, metadata.json's text pipeline (Moses or whitespace
tokens; subword-nmt or sentencepiece subwords) and model.json's decoder start. The search is fairseq's: a
sentence's best hypothesis by sum of log-probabilities / length, <pad> and <s> never produced, </s> forced at 200
tokens (nmt-generate's defaults; greedy gives nmt's greedy translations). ``--int8`` runs the graphs with int8
weights that onnx/engine.json lists (nmt-export's default ``--onnx-precision both``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

MAX_LEN, PAD, BOS, EOS, UNK = 200, 1, 0, 2, 3  # nmt dictionaries start <s> <pad> </s> <unk>


def read_dictionary(path: Path) -> list[str]:
    return ["<s>", "<pad>", "</s>", "<unk>"] + [line.rsplit(" ", 1)[0] for line in path.read_text("utf-8").splitlines()
                                                if line.rsplit(" ", 1)[0] not in ("<s>", "<pad>", "</s>", "<unk>")]


class Pipeline:
    """metadata.json's tokenizer and subword model for one language, both ways."""

    def __init__(self, folder: Path, spec: dict, lang: str):
        tok, bpe = spec["tokenizer"]["name"], spec["bpe"]["name"]
        codes = folder / spec["bpe"]["codes"][lang] if bpe != "none" else None
        self.moses = None
        if tok == "moses":
            from sacremoses import MosesDetokenizer, MosesTokenizer
            self.moses = (MosesTokenizer(lang=lang), MosesDetokenizer(lang=lang),
                          spec["tokenizer"].get("moses_aggressive_dash_splits", False))
        elif tok != "space":
            raise SystemExit(f"onnx_translate.py: tokenizer {tok!r} is not one this example knows")
        self.bpe, self.spm = None, None
        if bpe == "subword_nmt":
            from subword_nmt.apply_bpe import BPE
            with open(codes, encoding="utf-8") as f:
                self.bpe = BPE(f, separator="@@")
        elif bpe == "sentencepiece":
            import sentencepiece
            self.spm = sentencepiece.SentencePieceProcessor(model_file=str(codes))
        elif bpe != "none":
            raise SystemExit(f"onnx_translate.py: subword model {bpe!r} is not one this example knows")

    def encode(self, line: str) -> list[str]:
        text = " ".join(line.split())
        if self.moses:
            text = self.moses[0].tokenize(text, escape=False, return_str=True, aggressive_dash_splits=self.moses[2])
        if self.bpe:
            text = self.bpe.process_line(text)
        if self.spm:
            text = " ".join(self.spm.encode(text, out_type=str))
        return text.split()

    def decode(self, tokens: list[str]) -> str:
        text = " ".join(tokens)
        if self.bpe:
            text = (text + " ").replace("@@ ", "").strip()
        if self.spm:
            text = " ".join("".join(tokens).replace("\u2581", " ").split())
        return self.moses[1].detokenize(text.split(), return_str=True) if self.moses else text


class Model:
    """The encoder and the decoder step of MODEL_DIR/onnx (their inputs and outputs: nmt.engines.step)."""

    def __init__(self, folder: Path, threads: int, int8: bool = False):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        record = json.loads((folder / "onnx" / "engine.json").read_text("utf-8"))
        files = record["int8"] if int8 else record  # {"encoder": {"file": ...}, "decoder_step": {"file": ...}}
        self.encoder = ort.InferenceSession(str(folder / "onnx" / files["encoder"]["file"]), options)
        self.step_session = ort.InferenceSession(str(folder / "onnx" / files["decoder_step"]["file"]), options)
        self.layers = sum(1 for i in self.step_session.get_inputs() if i.name.startswith("self_k_"))
        self.shape = {i.name: i.shape for i in self.step_session.get_inputs()}

    def encode(self, src: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        out = self.encoder.run(None, {"src_tokens": src})
        return out[1], out[2:]  # the padding mask, every layer's cross keys and values

    def step(self, tokens: np.ndarray, positions: np.ndarray, padding: np.ndarray, cache: list[np.ndarray],
             cross: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """Log-probs (b, G, V) of the next token of each row, and the cache the next step takes."""
        feed = {"tokens": tokens, "positions": positions, "encoder_padding": padding}
        for i in range(self.layers):
            feed.update({f"self_k_{i}": cache[2 * i], f"self_v_{i}": cache[2 * i + 1],
                         f"cross_k_{i}": cross[2 * i], f"cross_v_{i}": cross[2 * i + 1]})
        out = self.step_session.run(None, feed)
        return out[0], out[1:]

    def empty_cache(self, b: int, g: int) -> list[np.ndarray]:
        dims = [(self.shape[f"self_{kv}_{i}"][2], self.shape[f"self_{kv}_{i}"][4]) for i in range(self.layers)
                for kv in "kv"]
        return [np.zeros((b, g, h, 0, d), dtype=np.float32) for h, d in dims]


def translate(model: Model, src: list[int], beam: int, start: int) -> list[int]:
    """The best output of one sentence (token ids without </s>): a beam of ``beam`` rows over its encoder row."""
    padding, cross = model.encode(np.array([src + [EOS]], dtype=np.int64))
    cache, rows = model.empty_cache(1, 1), [([start], 0.0)]
    finished: list[tuple[float, list[int]]] = []
    for t in range(MAX_LEN + 1):
        tokens = np.array([[r[0][-1] for r in rows]], dtype=np.int64)
        lprobs, cache = model.step(tokens, np.full_like(tokens, t), padding, cache, cross)
        lprobs = lprobs[0]  # (G, V)
        lprobs[:, [PAD, BOS]] = -np.inf
        if t == MAX_LEN:  # at the limit only </s>
            keep = lprobs[:, EOS].copy()
            lprobs[:] = -np.inf
            lprobs[:, EOS] = keep
        total = (np.array([r[1] for r in rows])[:, None] + lprobs).ravel()
        candidates = np.argsort(-total, kind="stable")[: 2 * beam]
        kept, order = [], []
        for rank, c in enumerate(candidates):
            row, token = divmod(int(c), lprobs.shape[1])
            if token == EOS:  # ends a hypothesis when among the best ``beam``, as in fairseq
                if rank < beam and len(finished) < beam:
                    finished.append((float(total[c]) / (t + 1), rows[row][0][1:]))
            elif len(kept) < beam:
                kept.append((rows[row][0] + [token], float(total[c])))
                order.append(row)
        if len(finished) >= beam or not kept:
            break
        rows, cache = kept, [c[:, order] for c in cache]
    return max(finished, key=lambda f: f[0])[1] if finished else rows[0][0][1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--int8", action="store_true", help="the graphs with int8 weights")
    args = parser.parse_args()
    folder = args.model_dir
    meta = json.loads((folder / "metadata.json").read_text("utf-8"))
    start = json.loads((folder / "model.json").read_text("utf-8"))["model_config"].get("decoder_start", "<s>")
    src_lang, tgt_lang = meta["source_lang"], meta["target_lang"]
    src_dict = read_dictionary(folder / meta["dictionaries"][src_lang]["file"])
    tgt_dict = read_dictionary(folder / meta["dictionaries"][tgt_lang]["file"])
    index = {s: i for i, s in enumerate(src_dict)}
    source, target = Pipeline(folder, meta["pipeline"], src_lang), Pipeline(folder, meta["pipeline"], tgt_lang)
    model = Model(folder, args.threads, args.int8)
    for line in sys.stdin:
        if not line.strip():
            print()
            continue
        ids = [index.get(tok, UNK) for tok in source.encode(line)]
        out = translate(model, ids, args.beam, tgt_dict.index(start))
        print(target.decode([tgt_dict[i] for i in out]), flush=True)


if __name__ == "__main__":
    main()
