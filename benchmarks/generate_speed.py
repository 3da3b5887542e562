"""Translation speed of nmt's searches on Multi30k test_2016_flickr (1,000 sentences).

    python benchmarks/generate_speed.py --data DATA_BIN [--path CKPT] [--beams 5,1] [--bf16]

With --path, a trained checkpoint decodes until its hypotheses end (compare with fairseq-generate's
96.5 sentences/s for beam 5 and 165 for greedy, batch 128, on this CPU). Without it, a randomly
initialised model of the reference size (3+3 layers, d 256, FFN 1024, 4 heads, shared embeddings)
decodes a fixed --fixed-len tokens per hypothesis (13 + eos, about the reference model's mean), so
the figure measures the search and the model's cost, not a translation. For each setting the
script also times the *model alone* (the same decoder steps on the same rows, cache included, no
search bookkeeping and no reordering): search time minus model time is the search's own overhead,
a ratio that stays meaningful on a busy machine.

Without --data, the Multi30k data-bin is built once in /tmp/nmt_bench_m30k (Moses + 10,000 joint
BPE merges, as the reference run).

--fairseq DIR instead decodes with the real fairseq 0.12 model of the peer reference folder
(../shared/peer/fairseq-m30k: checkpoint_best.pt, data-bin/dict.*.txt, test_2016_flickr.bpe.en),
imported in memory with nmt.interop (what nmt-import-fairseq checkpoint writes, docs/fairseq.md); it
prints speed, detokenized sacreBLEU against the raw reference, and how many best hypotheses equal
fairseq-generate's own.
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import time
from pathlib import Path

import torch

M30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"  # ../shared beside the checkout


def build_data_bin(folder: Path) -> Path:
    from nmt.cli.preprocess import main as preprocess

    dest = folder / "bin"
    if (dest / "metadata.json").is_file():
        return dest
    folder.mkdir(parents=True, exist_ok=True)
    try:
        preprocess(["--source-lang", "en", "--target-lang", "de", "--trainpref", str(M30K / "train"),
                    "--testpref", str(M30K / "test_2016_flickr"), "--destdir", str(dest), "--joined-dictionary",
                    "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-merges", "10000", "--workers", "2"])
    except SystemExit as e:
        if e.code not in (0, None):
            raise
    return dest


def random_model(src_dict, tgt_dict):
    from nmt.config.model import ModelConfig
    from nmt.models.build import build_model

    torch.manual_seed(0)
    cfg = ModelConfig(encoder_layers=3, decoder_layers=3, encoder_embed_dim=256, decoder_embed_dim=256,
                      encoder_ffn_embed_dim=1024, decoder_ffn_embed_dim=1024, encoder_attention_heads=4,
                      decoder_attention_heads=4, share_all_embeddings=True)
    return build_model(cfg, src_dict, tgt_dict).eval()


def fairseq_model(folder: Path, src_dict, tgt_dict):
    """The peer fairseq transformer as an nmt model, through the importer (nmt-import-fairseq checkpoint)."""
    from nmt.interop.fairseq_checkpoint import build_imported_model
    from nmt.interop.fairseq_unpickle import load_fairseq_file

    path = folder / "checkpoint_best.pt"
    return build_imported_model(load_fairseq_file(path), path, src_dict, tgt_dict)


def fairseq_reference(folder: Path, args) -> None:
    """Decode test_2016_flickr with the imported fairseq model; speed, BLEU, agreement."""
    import gzip
    import re

    from sacremoses import MosesDetokenizer

    from nmt.config.generate import GenerationConfig
    from nmt.generation.ensemble import EnsembleModel
    from nmt.generation.inference import decoder_start, inference_weights, pad_batch
    from nmt.generation.output import corpus_bleu
    from nmt.generation.search import build_search
    from nmt.interop.fairseq_data import read_fairseq_dictionary

    d = read_fairseq_dictionary(folder / "data-bin" / "dict.en.txt")
    ens = EnsembleModel([fairseq_model(folder, d, d)])
    inference_weights(ens, args.bf16)  # as nmt-generate does
    lines = (folder / "test_2016_flickr.bpe.en").read_text(encoding="utf-8").splitlines()[: args.limit]
    ids = [d.encode_line(line) for line in lines]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    batches = [order[i: i + args.batch_size] for i in range(0, len(order), args.batch_size)]
    with gzip.open(M30K / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        refs = [line.rstrip("\n") for line in f][: len(lines)]
    detok = MosesDetokenizer(lang="de")
    print(f"fairseq 0.12 checkpoint {folder / 'checkpoint_best.pt'} imported; {len(lines)} sentences, "
          f"batch size {args.batch_size}, {args.threads} threads, {'bf16' if args.bf16 else 'fp32'}")
    for beam in [int(b) for b in args.beams.split(",")]:
        search = build_search(GenerationConfig(beam=beam), d, decoder_start=decoder_start(ens, d))
        hyps: dict[int, str] = {}
        tokens = 0
        with torch.inference_mode():  # as nmt-generate runs it
            start, cpu = time.perf_counter(), time.process_time()
            for batch in batches:
                src, lengths = pad_batch([ids[i] for i in batch], d.pad())
                for i, h in zip(batch, search.search(ens, src, lengths)):
                    hyps[i] = d.string(h[0].tokens, bpe_symbol="@@ ")
                    tokens += len(h[0].tokens)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        bleu, signature = corpus_bleu([detok.detokenize(hyps[i].split()) for i in range(len(lines))], refs)
        theirs = {}
        ref_file = folder / f"test2016.beam{beam}.fairseq-generate.txt"
        if ref_file.is_file():
            for m in re.finditer(r"^H-(\d+)\t[^\t]*\t(.*)$", ref_file.read_text(encoding="utf-8"), re.M):
                theirs[int(m.group(1))] = m.group(2)
        same = sum(hyps[i] == theirs.get(i) for i in hyps)
        print(f"beam {beam}: {seconds:.2f} s ({cpu:.2f} CPU s), {len(lines) / seconds:.1f} sentences/s, "
              f"{tokens / seconds:.0f} tokens/s; "
              f"{bleu.split(' (')[0]} ({signature}); "
              + (f"{same}/{len(hyps)} best hypotheses identical to fairseq-generate's" if theirs else ""),
              flush=True)


@torch.inference_mode()
def model_only(ens, batches, rows_per_sentence: int, steps: int) -> float:
    """Seconds for ``steps`` cached decoder steps of every batch, rows never reordered or dropped."""
    start = time.perf_counter()
    for src, lengths in batches:
        encs, states = ens.encode(src, lengths), ens.new_states()
        tokens = torch.zeros(src.size(0), steps + 1, dtype=torch.long)
        for t in range(steps):
            lprobs, _ = ens.step(tokens[:, : t + 1], encs, states)
            tokens[:, t + 1] = lprobs.argmax(1)
            if t == 0 and rows_per_sentence > 1:  # like the beam search: one first step per sentence
                expand = torch.arange(src.size(0)).repeat_interleave(rows_per_sentence)
                encs, states = ens.reorder_encoder(encs, expand), ens.reorder_states(states, expand)
                tokens = tokens[expand]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="data-bin of Multi30k en-de (built in /tmp when omitted)")
    parser.add_argument("--path", help="trained checkpoint (default: random model, fixed output length)")
    parser.add_argument("--beams", default="5,1")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--fixed-len", type=int, default=13)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--limit", type=int, default=1000, help="translate only the first N test sentences")
    parser.add_argument("--fairseq", help="peer folder with a fairseq 0.12 checkpoint_best.pt (see above)")
    args = parser.parse_args()
    if args.fairseq:
        from nmt.plugin_loader import load_plugins

        load_plugins()
        torch.set_num_threads(args.threads)
        fairseq_reference(Path(args.fairseq), args)
        return

    from nmt.config.generate import GenerationConfig
    from nmt.data.batching import batch_by_size
    from nmt.data.language_pair_dataset import load_language_pair
    from nmt.generation.ensemble import EnsembleModel
    from nmt.generation.inference import inference_weights, load_ensemble, open_data_dir
    from nmt.generation.search import build_search
    from nmt.plugin_loader import load_plugins

    load_plugins()
    torch.set_num_threads(args.threads)
    data_bin = Path(args.data) if args.data else build_data_bin(Path("/tmp/nmt_bench_m30k"))
    data = open_data_dir(str(data_bin), "en", "de")
    ds = load_language_pair(str(data_bin), "test", "en", "de")
    if args.path:
        ens = load_ensemble(args.path, data.src_dict, data.tgt_dict)
        what = f"checkpoint {args.path}"
    else:
        ens = EnsembleModel([random_model(data.src_dict, data.tgt_dict)])
        what = f"random 3+3 d256 model, every hypothesis {args.fixed_len} tokens + eos"
    inference_weights(ens, args.bf16)
    n = min(args.limit, len(ds))
    plan = batch_by_size(ds.src_sizes[:n], None, max_tokens=None, max_sentences=args.batch_size, seed=None)
    batches = []
    for idx in plan.batches:
        b = ds.collater([ds[int(i)] for i in idx])
        batches.append((b["net_input"]["src_tokens"], b["net_input"]["src_lengths"]))
    print(f"{what}; {n} sentences, batch size {args.batch_size}, {args.threads} threads, "
          f"{'bf16' if args.bf16 else 'fp32'}")
    for beam in [int(b) for b in args.beams.split(",")]:
        fixed = {} if args.path else {"min_len": args.fixed_len, "max_len_b": args.fixed_len, "max_len_a": 0.0}
        search = build_search(GenerationConfig(beam=beam, **fixed), data.tgt_dict)
        with torch.inference_mode():
            search.search(ens, *batches[0])  # warm-up
            start, cpu = time.perf_counter(), time.process_time()
            tokens = 0
            for src, lengths in batches:
                hyps = search.search(ens, src, lengths)
                tokens += sum(len(h[0].tokens) for h in hyps)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            line = (f"beam {beam} ({type(search).__name__}): {seconds:.2f} s ({cpu:.2f} CPU s), "
                    f"{n / seconds:.1f} sentences/s, "
                    f"{tokens / seconds:.0f} tokens/s")
            if not args.path:
                floor = model_only(ens, batches, beam, args.fixed_len + 1)
                line += (f"; model alone {floor:.2f} s -> search overhead {100 * (seconds - floor) / seconds:.0f}% "
                         "of the time")
        print(line, flush=True)


if __name__ == "__main__":
    main()
