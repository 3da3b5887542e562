"""How the search schedules sentences, compared in one process, taking turns: batch by batch,
refilling finished rows with waiting sentences, and deferring a batch's last sentences.

The model and data default to the peer fairseq model (``../shared/peer/fairseq-m30k``, imported
with ``nmt-import-fairseq``; no fairseq install needed) on test_2016_flickr; ``--data``/``--path``
take any data-bin and checkpoint. Prints search speed (best and median of ``--repeats`` runs) and
how many best hypotheses equal those of batch-by-batch search.

    python benchmarks/generate_scheduling.py [--beam 5] [--bf16] [--repeats 3] [--defer-at 0.125,0.25]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEER = HERE.parent.parent / "shared" / "peer" / "fairseq-m30k"


def import_peer(work: Path) -> tuple[str, str]:
    """The peer fairseq model and data, converted for nmt (data-bin folder, checkpoint)."""
    data, model = work / "data-bin", work / "model.pt"
    for cmd in (["nmt-import-fairseq", "data", "--path", str(PEER / "data-bin"), "--output", str(data),
                 "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", str(PEER / "bpe.codes")],
                ["nmt-import-fairseq", "checkpoint", "--path", str(PEER / "checkpoint_best.pt"), "--data", str(data),
                 "--output", str(model)]):
        if subprocess.run(cmd, capture_output=True).returncode:
            sys.exit(f"generate_scheduling: {' '.join(cmd[:2])} failed; pass --data and --path")
    return str(data), str(model)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="data-bin folder (default: the imported peer fairseq model's)")
    ap.add_argument("--path", help="checkpoint (default: the imported peer fairseq model)")
    ap.add_argument("--subset", default="test")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--defer-at", default="", help="more shares to defer at, comma-separated (e.g. 0.125,0.25)")
    args = ap.parse_args()

    import nmt.generation.search as search_module
    from nmt.config.generate import GenerationConfig, InferenceConfig
    from nmt.data.batching import batch_by_size
    from nmt.data.language_pair_dataset import load_language_pair
    from nmt.generation.inference import make_translator, open_data_dir
    from nmt.plugin_loader import load_plugins

    load_plugins()
    data_dir, path = (args.data, args.path) if args.data and args.path else import_peer(Path(tempfile.mkdtemp()))
    data = open_data_dir(data_dir, None, None)
    ds = load_language_pair(data_dir, args.subset, data.src, data.tgt)
    gen = GenerationConfig(beam=args.beam)
    translator = make_translator(gen, InferenceConfig(path=path, bf16=args.bf16), data, seed=1)
    plan = batch_by_size(ds.src_sizes, None, max_tokens=None, max_sentences=args.batch_size, seed=None,
                         split=args.subset)
    batches = []
    for indices in plan.batches:
        b = ds.collater([ds[int(i)] for i in indices])
        batches.append((b["id"].tolist(), b["net_input"]["src_tokens"], b["net_input"]["src_lengths"]))

    search_cls = type(translator.search)
    defaults = (search_module.REFILL_AT, search_module.DEFER_AT, getattr(search_cls, "refill", None))
    schedules = {"batch by batch": (0.0, 0.0, False), "defer the last 1/16": (0.0, defaults[1], False),
                 "refill at 1/2": (defaults[0], 0.0, True), "refill at 1/4": (0.25, 0.0, True)}
    schedules.update({f"defer the last {float(share):g}": (0.0, float(share), False)
                      for share in args.defer_at.split(",") if share})

    def run(schedule: tuple[float, float, bool]) -> tuple[float, dict[int, list[int]]]:
        search_module.REFILL_AT, search_module.DEFER_AT = schedule[0], schedule[1]
        if defaults[2] is not None:
            search_cls.refill = schedule[2]  # beam search's switch (off by default)
        start = time.perf_counter()
        best = {i: h[0].tokens.tolist() for i, h in translator.translate_stream(batches)}
        return len(best) / (time.perf_counter() - start), best

    run(schedules["batch by batch"])  # warm-up
    speeds: dict[str, list[float]] = {name: [] for name in schedules}
    outputs: dict[str, dict[int, list[int]]] = {}
    for _ in range(args.repeats):
        for name, schedule in schedules.items():
            speed, outputs[name] = run(schedule)
            speeds[name].append(speed)
    print(f"{data_dir} {args.subset}, {path}; {search_cls.__name__}, beam {args.beam}, batch {args.batch_size}, "
          f"{'bf16' if args.bf16 else 'fp32'}; defaults: refill at {defaults[0]}, defer at {defaults[1]:.4f}"
          + (f", beam refill {defaults[2]}" if defaults[2] is not None else ""))
    print("| schedule | sentences/s best | median | best hypotheses = batch by batch |\n|---|---|---|---|")
    base = outputs["batch by batch"]
    for name in schedules:
        same = sum(outputs[name][i] == base[i] for i in base)
        print(f"| {name} | {max(speeds[name]):.1f} | {statistics.median(speeds[name]):.1f} | {same}/{len(base)} |")


if __name__ == "__main__":
    main()
