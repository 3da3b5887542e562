"""Where nmt-generate's search time goes, per decoding step, from torch's profiler: products (the
linear layers and the output projection), attention, the log-softmax over the vocabulary, top-k,
cache reordering, other operations, and Python (with the dispatcher) between them.

The search is nmt-generate's (the same batches, the same streaming schedule) on the imported fairseq
peer model and test_2016_flickr (``--peer``), or any checkpoint and data-bin (``--data``/``--path``), in fp32 unless
``--bf16`` or ``--quantize int8`` (or ``fp16``).
Three scopes are timed apart:
the encoder (``EnsembleModel.encode``), the decoder step (``EnsembleModel.step``: embedding, layers,
output projection, log-softmax) and the search's own work around it (choosing beams, reordering,
finishing hypotheses). Inside each scope every ATen operator's *self* time is put into a category by
its name (and, for products, by whether the vocabulary is one of its dimensions); what is left of a
scope's wall time is Python and dispatch. The profiler adds a few microseconds per operator, which
land in that last share: the unprofiled run's time is printed beside it.

With ``--ctranslate2`` the same weights also run in CTranslate2 (exported by
``nmt.interop.ctranslate2_export``, same beam, batch and threads), for its time per sentence beside ours (skipped,
with a line saying so, when CTranslate2 is not installed).
``--by-rows`` also prints the unprofiled search's steps by how many rows they had (the time from one step's start
to the next's: the step, the search's work after it, and any refill's encoder pass and merge).

    python -m benchmarks run decoder_step_profile [--peer DIR | --data BIN --path CKPT] [--beam 5]
        [--batch-size 128] [--threads 2] [--bf16 | --quantize int8|fp16] [--compile] [--ctranslate2] [--by-rows]
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import os
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, cast

import torch
from torch.autograd.profiler_util import FunctionEvent

from benchmarks import add_model_arguments, bpe_source, has_ctranslate2, model_inputs
from benchmarks.generate_vs_fairseq import CT2_COMPUTE_TYPES, SPEED, ctranslate2_command, ctranslate2_export
from nmt.errors import NmtError

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
        shapes = cast(list[list[int]], event.input_shapes or [])  # one shape per input
        return "output projection" if any(vocab in s for s in shapes if s) else "linear layers"
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


def main(argv: list[str]) -> str:
    ap = argparse.ArgumentParser(prog="decoder_step_profile", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(ap)
    ap.add_argument("--split", default="test", help="the split to translate [default: %(default)s]")
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
    args = ap.parse_args(argv)

    from nmt.plugin_loader import load_plugins

    load_plugins()
    with tempfile.TemporaryDirectory(prefix="nmt_step_profile_") as tmp:
        return profile(args, Path(tmp))


def profile(args: argparse.Namespace, work: Path) -> str:
    """Profile the search as the module says; returns the figures' line."""
    from omegaconf import OmegaConf

    from nmt.config.generate import GenerateJob
    from nmt.config.loader import resolve_config
    from nmt.data.batching import batch_by_size
    from nmt.data.data_bin import open_data_dir
    from nmt.data.language_pair_dataset import load_language_pair
    from nmt.generation.inference import source_batches
    from nmt.generation.loading import make_translator

    data_dir, model, _ = model_inputs(args.data, args.path, args.peer, work)
    cfg = OmegaConf.to_object(resolve_config(GenerateJob, overrides=[
        f"data={data_dir}", f"inference.path={model}", f"generation.beam={args.beam}",
        f"inference.threads={args.threads}", f"inference.quantize={args.quantize}",
        f"inference.bf16={args.bf16}", f"inference.compile={args.compile}"]))
    assert isinstance(cfg, GenerateJob)
    data = open_data_dir(cfg.data, None, None)
    dataset = load_language_pair(str(data.path), args.split, data.src, data.tgt)
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
                             split=args.split)
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
    print(f"{data_dir} {args.split}, {len(dataset)} sentences, beam {args.beam}, batch {args.batch_size}, "
          f"{args.threads} threads, {precision}, {steps} decoder steps")
    print(f"search: {plain:.2f} s unprofiled ({len(dataset) / plain:.1f} sentences/s, "
          f"{1000 * plain / steps:.2f} ms per step), {profiled:.2f} s under the profiler")
    if profiled > 2 * plain:  # with two threads on two cores the profiler can slow large operators several times
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

    figures = (f"{precision} beam {args.beam}: {len(dataset) / plain:.1f} sentences/s, {1000 * plain / steps:.2f} ms "
               "per step; " + ", ".join(f"{scope} {100 * own[scope] / total:.0f}%" for scope in SCOPES))
    if args.ctranslate2 and not has_ctranslate2():
        print("CTranslate2: not installed (pip install 'nmt[ctranslate2]'): skipped")
    elif args.ctranslate2:
        folder, suppress = ctranslate2_export(model, data_dir, work)
        source = bpe_source(data_dir, args.split, work / "source.bpe")
        # its default backend on Intel CPUs is MKL; its oneDNN backend (CT2_USE_MKL=0) can be several times faster
        runs: list[tuple[str, str, dict[str, str]]] = [(compute, "", {}) for compute in CT2_COMPUTE_TYPES]
        runs.append(("float32", ", oneDNN", {"CT2_USE_MKL": "0"}))
        for compute, backend, env in runs:
            out = subprocess.run(ctranslate2_command(folder, source, compute, args.beam, args.batch_size, args.threads,
                                                     suppress),
                                 capture_output=True, text=True, env={**os.environ, **env})
            m = SPEED.search(out.stderr)
            if out.returncode or not m:
                last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
                raise NmtError(f"CTranslate2 {compute}{backend} failed: {last}")
            seconds = float(m.group(2))
            print(f"CTranslate2 {compute}{backend}: {seconds:.2f} s ({len(dataset) / seconds:.1f} sentences/s), "
                  f"{plain / seconds:.2f}x nmt's time; at nmt's step count {1000 * seconds / steps:.2f} ms per step")
            figures += f"; CTranslate2 {compute}{backend} {len(dataset) / seconds:.1f} sentences/s"
    return figures
