"""Forward+backward time and peak memory of one self-attention layer per attention plugin, for
sequence lengths 128 .. 4096: the shape of the paper's Table 1 (full attention ~n^2, restricted
~n*r). Prints a table and the fitted log-log slopes, and saves a log-log plot when matplotlib is
installed.

    python -m benchmarks run attention_complexity [--dim 256 --heads 4 --window 32 --png out.png]

Peak memory is what the CPU allocator handed out during the step (torch profiler), above what
existed before it. The fused scaled-dot-product kernel never stores the n x n matrix, so its
memory grows ~n; the "scaled_dot_product+weights" row runs the explicit path (need_weights)
that materialises it, which is the paper's O(n^2) memory.
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from nmt.plugin_loader import load_plugins
from nmt.registry import ATTENTION

LENGTHS = [128, 256, 512, 1024, 2048, 4096]
# (label, plugin, need_weights, longest n): the explicit and additive forms need O(n^2 d) memory
VARIANTS = [
    ("scaled_dot_product", "scaled_dot_product", False, 4096),
    ("scaled_dot_product+weights", "scaled_dot_product", True, 2048),
    ("restricted", "restricted", False, 4096),
    ("additive", "additive", False, 512),
]


def step(layer: torch.nn.Module, x: torch.Tensor, need_weights: bool) -> None:
    out, _ = layer(x, need_weights=need_weights)
    out.sum().backward()


def time_step(layer: torch.nn.Module, x: torch.Tensor, need_weights: bool, budget: float = 1.5) -> float:
    """Best seconds of a forward+backward after one warm-up, repeated within ``budget`` s (the
    minimum, because other processes on a shared CPU only ever add time)."""
    step(layer, x, need_weights)
    times: list[float] = []
    while not times or (sum(times) < budget and len(times) < 5):
        t0 = time.perf_counter()
        step(layer, x, need_weights)
        times.append(time.perf_counter() - t0)
    return min(times)


def peak_bytes(layer: torch.nn.Module, x: torch.Tensor, need_weights: bool) -> int:
    """Peak CPU bytes allocated during one forward+backward (from the profiler's memory events)."""
    layer.zero_grad(set_to_none=True)
    x.grad = None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step(layer, x, need_weights)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    memory = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    if not memory:
        return 0
    base = memory[0]["args"]["Total Allocated"] - memory[0]["args"]["Bytes"]
    return max(e["args"]["Total Allocated"] for e in memory) - base


def slope(ns: list[int], values: list[float]) -> float:
    """Least-squares exponent k of values ~ n^k."""
    xs, ys = [math.log(n) for n in ns], [math.log(max(v, 1e-12)) for v in values]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def plot(results: dict[str, list[tuple[int, float, int]]], path: Path, window: int) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib): no plot written")
        return
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.5))
    for label, rows in results.items():
        ns = [r[0] for r in rows]
        ax_t.loglog(ns, [r[1] * 1e3 for r in rows], "o-", label=label)
        ax_m.loglog(ns, [r[2] / 2**20 for r in rows], "o-", label=label)
    ax_t.set(xlabel="sequence length n", ylabel="forward+backward ms", title="time")
    ax_m.set(xlabel="sequence length n", ylabel="peak MiB", title="memory")
    for ax in (ax_t, ax_m):
        ax.grid(True, which="both", alpha=0.3)
        ax.set_xticks(LENGTHS, [str(n) for n in LENGTHS])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax_t.legend(fontsize=8)
    fig.suptitle(f"One self-attention layer on CPU (restricted r = {window})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot saved to {path}")


def main(argv: list[str]) -> str:
    ap = argparse.ArgumentParser(prog="attention_complexity", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dim", type=int, default=256, help="d_model")
    ap.add_argument("--heads", type=int, default=4, help="attention heads")
    ap.add_argument("--window", type=int, default=32, help="restricted attention's r")
    ap.add_argument("--max-n", type=int, default=4096, help="longest sequence length")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is steadier on a busy machine)")
    ap.add_argument("--budget", type=float, default=1.5, help="seconds of repeats per measurement (at most 5 runs)")
    ap.add_argument("--png", default="attention_complexity.png", help="plot file [default: %(default)s]")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load_plugins()
    results: dict[str, list[tuple[int, float, int]]] = {}
    print(f"d_model {args.dim}, {args.heads} heads, batch 1, r = {args.window}, {args.threads} threads, fp32")
    print(f"{'attention':28} {'n':>6} {'fwd+bwd ms':>11} {'peak MiB':>9}")
    for label, name, need_weights, longest in VARIANTS:
        options = {"attention_window": args.window} if name == "restricted" else {}
        layer = ATTENTION.build(name, options, args.dim, args.heads, self_attention=True, causal=False, dropout=0.0)
        for n in (n for n in LENGTHS if n <= min(longest, args.max_n)):
            x = torch.randn(1, n, args.dim, requires_grad=True)
            seconds = time_step(layer, x, need_weights, args.budget)
            peak = peak_bytes(layer, x, need_weights)
            results.setdefault(label, []).append((n, seconds, peak))
            print(f"{label:28} {n:>6} {seconds * 1e3:>11.1f} {peak / 2**20:>9.1f}", flush=True)
    print("\nlog-log slopes over n >= 512 (time ~ n^k, memory ~ n^k; Table 1: full 2, restricted 1)")
    slopes = []
    for label, rows in results.items():
        tail = [r for r in rows if r[0] >= 512] if len([r for r in rows if r[0] >= 512]) >= 2 else rows
        ns = [r[0] for r in tail]
        time_k, memory_k = slope(ns, [r[1] for r in tail]), slope(ns, [r[2] for r in tail])
        slopes.append(f"{label} {time_k:.2f} / {memory_k:.2f}")
        print(f"{label:28} time k = {time_k:.2f}   memory k = {memory_k:.2f}")
    plot(results, Path(args.png), args.window)
    return "log-log slopes, time / memory: " + ", ".join(slopes)
