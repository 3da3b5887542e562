"""Where nmt-generate's search time goes, per decoding step, from torch's profiler: products (the
linear layers and the output projection), attention, the log-softmax over the vocabulary, top-k,
cache reordering, other operations, and Python (with the dispatcher) between them.

The search is nmt-generate's (the same batches, the same streaming schedule) on the imported fairseq
peer model and test_2016_flickr, in fp32 unless ``--bf16`` or ``--quantize int8`` (or ``fp16``).
Three scopes are timed apart:
the encoder (``EnsembleModel.encode``), the decoder step (``EnsembleModel.step``: embedding, layers,
output projection, log-softmax) and the search's own work around it (choosing beams, reordering,
finishing hypotheses). Inside each scope every ATen operator's *self* time is put into a category by
its name (and, for products, by whether the vocabulary is one of its dimensions); what is left of a
scope's wall time is Python and dispatch. The profiler adds a few microseconds per operator, which
land in that last share: the unprofiled run's time is printed beside it.

With ``--ctranslate2`` the same weights also run in CTranslate2 (exported by
``nmt.interop.ctranslate2_export``, same beam, batch and threads), for its time per sentence beside ours.
``--by-rows`` also prints the unprofiled search's steps by how many rows they had (the time from one step's start
to the next's: the step, the search's work after it, and any refill's encoder pass and merge).

    python benchmarks/decoder_step_profile.py [--beam 5] [--batch-size 128] [--threads 2]
        [--bf16 | --quantize int8|fp16] [--compile] [--ctranslate2] [--by-rows]
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import generate_vs_fairseq as peer  # noqa: E402  (the peer model, its import and CTranslate2 runs)
import torch
from torch.autograd.profiler_util import FunctionEvent

SCOPES = ("encoder", "decoder step", "search")
ROW_RANGES = ((1, 8), (8, 16), (16, 40), (40, 80), (80, 129), (129, 641))  # --by-rows: [low, high) rows per step
PRODUCTS = {"aten::addmm", "aten::mm", "aten::linear", "aten::matmul", "aten::mkldnn_linear",
            "quantized::linear_dynamic", "quantized::linear_dynamic_fp16", "aten::_mkldnn_linear",
            "mkldnn::_linear_pointwise"}  # the last: --bf16's packed weights
CATEGORIES: list[tuple[str, Callable[[str], bool]]] = [
    ("attention products", lambda n: n in {"aten::bmm", "aten::baddbmm", "aten::_scaled_dot_product_attention_math",
                                           "aten::_scaled_dot_product_flash_attention_for_cpu"}),
    ("attention softmax", lambda n: n in {"aten::_softmax", "aten::softmax"}),
    ("log-softmax over the vocabulary", lambda n: n in {"aten::_log_softmax", "aten::log_softmax"}),
    ("top-k and selection", lambda n: n in {"aten::topk", "aten::sort", "aten::max", "aten::argmax", "aten::nonzero",
                                            "aten::masked_select", "aten::where"}),
    ("cache reordering and copies", lambda n: n in {"aten::index_select", "aten::index", "aten::gather", "aten::cat",
                                                    "aten::copy_", "aten::index_copy_", "aten::take",
                                                    "aten::contiguous", "aten::clone"}),
    ("layer norm", lambda n: "layer_norm" in n),
]


def category(event: FunctionEvent, vocab: int) -> str:
    """The share an operator's self time goes to."""
    if event.name in PRODUCTS:
        shapes = [tuple(s) for s in (event.input_shapes or []) if s]
        return "output projection" if any(vocab in s for s in shapes) else "linear layers"
    for name, matches in CATEGORIES:
        if matches(event.name):
            return name
    return "other operators"


def scope_of(event: FunctionEvent) -> str | None:
    """The innermost of SCOPES an event runs in, itself excluded (None: outside the search)."""
    node = event.cpu_parent
    while node is not None and node.name not in SCOPES:
        node = node.cpu_parent
    return None if node is None else node.name


def scoped(name: str, fn: Callable[..., Any], counter: list[int] | None = None) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if counter is not None:
            counter[0] += 1
        with torch.profiler.record_function(name):
            return fn(*args, **kwargs)
    return wrapper


def steps_by_rows(starts: list[tuple[int, float]], end: float) -> list[tuple[int, float]]:
    """(steps, seconds) per ROW_RANGES range, from each step's (rows, start) and when the search ended (a step
    lasts until the next one starts; the last, until the end)."""
    ends = [when for _, when in starts[1:]] + [end]
    out = []
    for low, high in ROW_RANGES:
        spans = [end - when for (rows, when), end in zip(starts, ends) if low <= rows < high]
        out.append((len(spans), sum(spans)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peer", default=str(peer.SHARED / "peer" / "fairseq-m30k"), help="the fairseq model folder")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--quantize", choices=["none", "int8", "fp16"], default="none")
    ap.add_argument("--bf16", action="store_true", help="weights and activations in bfloat16, as nmt-generate --bf16")
    ap.add_argument("--compile", action="store_true", help="the decoder step through torch.compile, as nmt-generate "
                    "--compile; two untimed passes compile it first. The compiled kernels are not ATen operators: "
                    "their time is in 'Python and dispatch', what is left of a scope's time")
    ap.add_argument("--ctranslate2", action="store_true", help="time CTranslate2 on the same weights too")
    ap.add_argument("--by-rows", action="store_true", help="also the unprofiled search's steps by their row count")
    args = ap.parse_args()

    from omegaconf import OmegaConf

    from nmt.config.generate import GenerateJob
    from nmt.config.loader import resolve_config
    from nmt.data.batching import batch_by_size
    from nmt.data.language_pair_dataset import load_language_pair
    from nmt.generation.inference import make_translator, open_data_dir, source_batches
    from nmt.plugin_loader import load_plugins

    load_plugins()
    work = Path(tempfile.mkdtemp(prefix="nmt_step_profile_"))
    data_dir, model = peer.import_peer(Path(args.peer), work)
    cfg = OmegaConf.to_object(resolve_config(GenerateJob, overrides=[
        f"data={data_dir}", f"inference.path={model}", f"generation.beam={args.beam}",
        f"inference.threads={args.threads}", f"inference.quantize={args.quantize}",
        f"inference.bf16={args.bf16}", f"inference.compile={args.compile}"]))
    data = open_data_dir(cfg.data, None, None)
    dataset = load_language_pair(str(data.path), "test", data.src, data.tgt)
    vocab = len(data.tgt_dict)

    translator = make_translator(cfg.generation, cfg.inference, data, cfg.common.seed)  # one: compiled once
    ens, step_count = translator.ens, [0]
    ens.encode = scoped("encoder", ens.encode)  # type: ignore[method-assign]
    ens.step = scoped("decoder step", ens.step, step_count)  # type: ignore[method-assign]
    starts: list[tuple[int, float]] = []  # --by-rows: (rows, when) of every decoder step of the last search
    if args.by_rows:  # (only then: the wrapper would otherwise add to the profiled pass's Python share)
        counted_step = ens.step

        def marked_step(tokens: torch.Tensor, *rest: Any, **kwargs: Any) -> Any:
            starts.append((tokens.size(0), time.perf_counter()))
            return counted_step(tokens, *rest, **kwargs)

        ens.step = marked_step  # type: ignore[method-assign]

    def search_seconds(profiled: bool) -> tuple[float, int, Any]:
        step_count[0] = 0
        starts.clear()
        plan = batch_by_size(dataset.src_sizes, None, max_tokens=None, max_sentences=args.batch_size, seed=None,
                             max_source_positions=translator.max_source_positions(), skip_invalid=False,
                             split="test")
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) \
            if profiled else None
        start = time.perf_counter()
        if prof is not None:
            prof.start()
        with torch.profiler.record_function("search"):
            for _ in translator.translate_stream(source_batches(dataset, plan.batches)):
                pass
        if prof is not None:
            prof.stop()
        return time.perf_counter() - start, step_count[0], prof

    for _ in range(2 if args.compile else 1):  # warm-up: first-call costs (and compiling) are not a step's
        search_seconds(False)
    plain, steps, _ = search_seconds(False)
    by_rows = steps_by_rows(starts, time.perf_counter()) if args.by_rows else []  # (the search just ended)
    profiled, _, prof = search_seconds(True)

    wall: dict[str, float] = defaultdict(float)  # scope -> µs (the outermost record_function events)
    self_time: dict[tuple[str, str], float] = defaultdict(float)  # (scope, category) -> µs
    for event in prof.events():
        if event.name in SCOPES:  # scopes do not nest in themselves
            wall[event.name] += event.cpu_time_total
            continue
        scope = scope_of(event)
        if scope is not None and event.name.startswith(("aten::", "quantized::", "mkldnn::")):
            self_time[(scope, category(event, vocab))] += event.self_cpu_time_total
    # "search" is the whole; the search's own work is what the two inner scopes leave of it.
    own = {"encoder": wall["encoder"], "decoder step": wall["decoder step"],
           "search": wall["search"] - wall["encoder"] - wall["decoder step"]}
    total = wall["search"]
    precision = ("bf16" if args.bf16 else "fp32" if args.quantize == "none" else args.quantize) + \
        (", compiled" if args.compile else "")
    print(f"test_2016_flickr, {len(dataset)} sentences, beam {args.beam}, batch {args.batch_size}, "
          f"{args.threads} threads, {precision}, {steps} decoder steps")
    print(f"search: {plain:.2f} s unprofiled ({len(dataset) / plain:.1f} sentences/s, "
          f"{1000 * plain / steps:.2f} ms per step), {profiled:.2f} s under the profiler")
    if profiled > 2 * plain:  # seen on a 2-core Xeon with two threads: 9.5x, large operators several times slower
        print(f"warning: the profiler slowed the search {profiled / plain:.1f}x; the shares below are distorted (time "
              "single operators without it, or profile with --threads 1)")
    print("| scope | share | ms per step (profiled) |")
    print("|---|---:|---:|")
    for scope in SCOPES:
        rows = sorted(((c, t) for (s, c), t in self_time.items() if s == scope), key=lambda r: -r[1])
        python = own[scope] - sum(t for _, t in rows)
        for name, t in [*rows, ("Python and dispatch", python)]:
            print(f"| {scope}: {name} | {100 * t / total:.1f}% | {t / 1000 / steps:.3f} |")
        print(f"| **{scope}, all** | **{100 * own[scope] / total:.1f}%** | **{own[scope] / 1000 / steps:.3f}** |")

    if by_rows:
        print("| rows per step | steps | seconds | ms per step |")
        print("|---|---:|---:|---:|")
        for (low, high), (count, seconds) in zip(ROW_RANGES, by_rows):
            if count:
                print(f"| {low}-{high - 1} | {count} | {seconds:.2f} | {1000 * seconds / count:.2f} |")

    if args.ctranslate2:
        folder = peer.ctranslate2_folder(model, data_dir, work)
        if folder is None:
            sys.exit("decoder_step_profile: --ctranslate2 needs the ctranslate2 package "
                     "(pip install 'nmt[ctranslate2]')")
        # its default backend on Intel CPUs is MKL; oneDNN (CT2_USE_MKL=0) was 3x faster on the AMX Xeon
        runs = [(compute, "", {}) for compute in peer.CT2_COMPUTE_TYPES]
        runs.append(("float32", ", oneDNN", {"CT2_USE_MKL": "0"}))
        for compute, backend, env in runs:
            out = subprocess.run(peer.ctranslate2_command(folder, Path(args.peer) / "test_2016_flickr.bpe.en", compute,
                                                     args.beam, args.batch_size, args.threads),
                                 capture_output=True, text=True, check=True, env={**os.environ, **env})
            m = peer.SPEED.search(out.stderr)
            seconds = float(m.group(2)) if m else float("nan")
            print(f"CTranslate2 {compute}{backend}: {seconds:.2f} s ({len(dataset) / seconds:.1f} sentences/s), "
                  f"{plain / seconds:.2f}x nmt's time; at nmt's step count {1000 * seconds / steps:.2f} ms per step")


if __name__ == "__main__":
    main()
