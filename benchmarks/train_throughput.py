"""Training throughput (target tokens per second) of nmt's trainer on Multi30k en-de, fp32 and --bf16,
beside a stock ``torch.nn.Transformer`` of the same shape trained on the same batches (the anchor
that makes numbers from a busy machine comparable: their ratio). train_vs_fairseq compares with fairseq itself.

Setting (the fairseq 0.12 reference run of ../shared/tools/RESULTS.md): 3+3 layers, d 256, FFN 1024, 4 heads,
shared embeddings, dropout 0.1, adam (0.9, 0.98), lr 5e-4, inverse_sqrt warmup 4000, label smoothing 0.1,
--max-tokens 4096.

    python -m benchmarks run train_throughput --data data-bin/multi30k_en_de [--updates 60] [--warmup 5]
        [--profile N] [--layers 3 --dim 256]

``--profile N`` then runs N more of nmt's updates per mode, once as they are and once under torch's profiler,
and prints the share of their time in matrix products, the products' rate against one large product of the same
dtype on this CPU, and the wps nmt would reach if everything but its products took no time: how far removing
the rest alone could take it.

The data-bin comes from ``scripts/quickstart.sh --from ../shared/data/multi30k``.
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import math
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks import data_bin


def setting(layers: int, dim: int) -> list[str]:
    """The reference setting's overrides, with ``layers`` per side and width ``dim`` (FFN 4 x dim, 4 heads)."""
    return [
        "model.arch=transformer_base", f"model.encoder_layers={layers}", f"model.decoder_layers={layers}",
        f"model.encoder_embed_dim={dim}", f"model.decoder_embed_dim={dim}", f"model.encoder_ffn_embed_dim={4 * dim}",
        f"model.decoder_ffn_embed_dim={4 * dim}", "model.encoder_attention_heads=4", "model.decoder_attention_heads=4",
        "model.share_all_embeddings=true", "model.dropout=0.1", "optimizer.name=adam",
        "optimizer.adam_betas=(0.9,0.98)", "optimization.lr=0.0005", "lr_scheduler.name=inverse_sqrt",
        "lr_scheduler.warmup_updates=4000", "criterion.name=label_smoothed_cross_entropy",
        "criterion.label_smoothing=0.1", "task.max_tokens=4096", "checkpoint.no_save=true",
        "task.disable_validation=true", "common.no_progress_bar=true",
    ]


def build_ours(data: Path, save_dir: Path, bf16: bool, layers: int = 3, dim: int = 256) -> Any:
    """nmt's TrainingRun for the setting (model, criterion, optimizer, iterator: the real pieces)."""
    from omegaconf import OmegaConf

    from nmt.config.loader import resolve_config
    from nmt.config.model import arch_preset
    from nmt.config.train import TrainJob
    from nmt.cpu_speed.memory import keep_freed_memory
    from nmt.plugin_loader import load_plugins
    from nmt.training import distributed
    from nmt.training.loop import TrainingRun

    load_plugins()
    keep_freed_memory()  # as nmt-train does: without it every update faults its large blocks back in
    overrides = setting(layers, dim) + [f"task.data={data}", f"checkpoint.save_dir={save_dir}",
                                        f"precision.bf16={bf16}"]
    cfg = OmegaConf.to_object(resolve_config(TrainJob, overrides=overrides, preset=arch_preset))
    assert isinstance(cfg, TrainJob)
    return TrainingRun(cfg, distributed.init(cfg.distributed_training))


def batches_forever(run: Any) -> Iterator[dict[str, Any]]:
    while True:
        yield from run.train_itr.next_epoch_itr()


class StockTransformer(nn.Module):
    """torch.nn.Transformer with one shared embedding / output matrix: the anchor, written plainly."""

    pe: torch.Tensor  # (P, C) sinusoidal positions, a buffer

    def __init__(self, vocab: int, pad: int, dim: int = 256, heads: int = 4, layers: int = 3, ffn: int = 1024,
                 dropout: float = 0.1):
        super().__init__()
        self.pad, self.dim = pad, dim
        self.embed = nn.Embedding(vocab, dim, padding_idx=pad)
        nn.init.normal_(self.embed.weight, std=dim ** -0.5)
        self.core = nn.Transformer(dim, heads, layers, layers, ffn, dropout, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        position = torch.arange(1024).unsqueeze(1)  # (P, 1)
        freq = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))  # (C/2,)
        pe = torch.zeros(1024, dim)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * freq), torch.cos(position * freq)
        self.register_buffer("pe", pe, persistent=False)  # (P, C)

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) * math.sqrt(self.dim) + self.pe[: tokens.size(1)]  # (B, T, C)
        return self.dropout(x)

    def forward(self, src: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        causal = torch.ones(prev.size(1), prev.size(1), dtype=torch.bool).triu(1)  # (T, T) True = hidden
        h = self.core(self.embed_tokens(src), self.embed_tokens(prev), tgt_mask=causal,
                      src_key_padding_mask=src.eq(self.pad), tgt_key_padding_mask=prev.eq(self.pad),
                      memory_key_padding_mask=src.eq(self.pad))  # (B, T, C)
        return h @ self.embed.weight.t()  # (B, T, V)


def trainer_step(trainer: Any) -> Callable[[dict[str, Any]], Any]:
    """One update of nmt's trainer on one batch."""
    return lambda sample: trainer.train_step([sample])


def stock_step_fn(vocab: int, pad: int, bf16: bool, layers: int = 3,
                  dim: int = 256) -> Callable[[dict[str, Any]], None]:
    model = StockTransformer(vocab, pad, dim=dim, layers=layers, ffn=4 * dim)
    opt = torch.optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), foreach=True)
    model.train()

    def step(sample: dict[str, Any]) -> None:
        net = sample["net_input"]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(net["src_tokens"], net["prev_output_tokens"])  # (B, T, V)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), sample["target"].view(-1),
                               ignore_index=pad, label_smoothing=0.1, reduction="sum")
        (loss / sample["ntokens"]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def measure(steps: dict[str, Callable[[dict[str, Any]], Any]], batches: Iterator[dict[str, Any]], warmup: int,
            updates: int, rounds: int) -> dict[str, float]:
    """Target tokens per second of each step function over ``updates`` updates (after ``warmup``
    untimed ones), measured in ``rounds`` interleaved blocks on the same batches, so that a change
    in the machine's load hits every contender alike. nmt's time includes collating the batches."""
    for step in steps.values():
        for _ in range(warmup):
            step(next(batches))
    tokens = dict.fromkeys(steps, 0)
    seconds = dict.fromkeys(steps, 0.0)
    per_round = -(-updates // rounds)
    for _ in range(rounds):
        start = time.perf_counter()
        block = [next(batches) for _ in range(per_round)]  # collated once, the same for everyone
        seconds["nmt"] += time.perf_counter() - start  # nmt's data loading counts, as fairseq's does
        for name, step in steps.items():
            start = time.perf_counter()
            for sample in block:
                step(sample)
            seconds[name] += time.perf_counter() - start
            tokens[name] += sum(int(s["ntokens"]) for s in block)
    return {name: tokens[name] / seconds[name] for name in steps}


PRODUCT_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
SHARES = (("matrix products", lambda n: n in PRODUCT_OPS),  # the first that matches an operator's name
          ("copies and casts", lambda n: n in {"aten::copy_", "aten::_to_copy", "aten::cat", "aten::index_select"}),
          ("dropout's random bits", lambda n: n in {"aten::random_", "aten::bernoulli_", "aten::uniform_"}),
          ("other operators", lambda n: True))


def large_product_rate(dtype: torch.dtype, size: int = 2048) -> float:
    """GFLOP/s of one (size x size) @ (size x size) product in ``dtype``: what this CPU gives a product that
    is large enough to run at its best."""
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    a @ b
    start, reps = time.perf_counter(), 5
    for _ in range(reps):
        a @ b
    return 2 * size ** 3 * reps / (time.perf_counter() - start) / 1e9


def profile_updates(step: Callable[[dict[str, Any]], Any], batches: Iterator[dict[str, Any]], updates: int,
                    dtype: torch.dtype, product_size: int) -> str:
    """Print how much of ``updates`` updates' time their matrix products take (the profiler's self times and FLOP
    counts), at what rate, and the rest's split. The block runs once unprofiled first, which is the time the
    shares are of: the profiler's own allocations make the heap fault pages back in (measured: 0 page faults per 4
    updates unprofiled, ~200k profiled), which inflates the copies' time under it, not the products'."""
    from torch.profiler import profile

    block = [next(batches) for _ in range(updates)]
    tokens = sum(int(sample["ntokens"]) for sample in block)
    start = time.perf_counter()
    for sample in block:
        step(sample)
    wall = time.perf_counter() - start
    with profile(with_flops=True) as prof:
        for sample in block:
            step(sample)
    seconds: dict[str, float] = {}
    flops = 0
    for e in prof.key_averages():
        name = next(label for label, matches in SHARES if matches(e.key))
        seconds[name] = seconds.get(name, 0.0) + e.self_cpu_time_total / 1e6
        flops += e.flops if e.key in PRODUCT_OPS else 0
    products = seconds.pop("matrix products", 0.0)
    rate, best = flops / products / 1e9, large_product_rate(dtype, product_size)
    kind = str(dtype).split(".")[-1]
    print(f"  {updates} updates, {wall:.2f} s: matrix products {products:.2f} s ({products / wall:.0%}) at {rate:.0f} "
          f"GFLOP/s, {rate / best:.0%} of a {product_size}^3 {kind} product's {best:.0f} here; the rest "
          f"{wall - products:.2f} s (profiled: " + ", ".join(f"{name} {t:.2f} s" for name, t in seconds.items())
          + f"). With the rest at no cost: {tokens / products:,.0f} wps", flush=True)
    return f"products {products / wall:.0%} of the time at {rate / best:.0%} of a large product's rate"


def main(argv: list[str]) -> str:
    ap = argparse.ArgumentParser(prog="train_throughput", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="data-bin/multi30k_en_de", help="a data-bin [default: %(default)s, which "
                    "scripts/quickstart.sh writes]")
    ap.add_argument("--updates", type=int, default=60, help="timed updates per measurement [default: %(default)s]")
    ap.add_argument("--warmup", type=int, default=5, help="untimed updates first [default: %(default)s]")
    ap.add_argument("--modes", default="fp32,bf16", help="[default: %(default)s]")
    ap.add_argument("--rounds", type=int, default=4, help="interleaved blocks the updates are split into")
    ap.add_argument("--no-stock", action="store_true", help="skip the nn.Transformer anchor")
    ap.add_argument("--profile", type=int, default=0, help="then profile this many of nmt's updates")
    ap.add_argument("--product-size", type=int, default=2048, help="--profile's yardstick: one N x N x N product")
    ap.add_argument("--layers", type=int, default=3, help="layers per side (3: the reference shape)")
    ap.add_argument("--dim", type=int, default=256, help="model width, FFN 4x (256: the reference shape)")
    args = ap.parse_args(argv)
    data = data_bin(args.data, "--data")
    rows = []
    notes = []
    with tempfile.TemporaryDirectory() as save_dir:  # nothing is saved; the run needs the folder all the same
        for mode in args.modes.split(","):
            bf16 = mode == "bf16"
            run = build_ours(data, Path(save_dir), bf16, args.layers, args.dim)
            torch.manual_seed(1)
            steps = {"nmt": trainer_step(run.trainer)}
            if not args.no_stock:
                steps["stock"] = stock_step_fn(len(run.data.tgt_dict), run.data.tgt_dict.pad(), bf16, args.layers,
                                               args.dim)
            batches = batches_forever(run)
            wps = measure(steps, batches, args.warmup, args.updates, args.rounds)
            rows.append((mode, wps["nmt"], wps.get("stock")))
            print(f"{mode}: " + ", ".join(f"{k} {v:,.0f} wps" for k, v in wps.items()), flush=True)
            if args.profile:
                dtype = torch.bfloat16 if bf16 else torch.float32
                notes.append(f"{mode} " + profile_updates(steps["nmt"], batches, args.profile, dtype,
                                                          args.product_size))
    print(f"\nthreads {torch.get_num_threads()}, {args.updates} timed updates after {args.warmup} warm-up, "
          "--max-tokens 4096")
    print(f"{'mode':<6} {'nmt wps':>9} {'stock wps':>10} {'nmt/stock':>10}")
    for mode, ours, stock in rows:
        print(f"{mode:<6} {ours:>9,.0f} {stock or 0:>10,.0f} {f'{ours / stock:.2f}' if stock else '-':>10}")
    return "; ".join([*(f"{mode} nmt {ours:,.0f} wps" + (f", stock {stock:,.0f} ({ours / stock:.2f}x)" if stock else "")
                        for mode, ours, stock in rows), *notes])
