"""Would fusing a training update's small operators pay? nmt's trainer in ``--bf16`` (fairseq's reference shape,
``train_throughput.py``'s setting), with and without ``torch.compile`` of the elementwise work around the products.

Outside the matrix products, a ``--bf16`` update is spread over many small operators (dropout, residual adds,
layer norms, ReLU, casts: docs/training.md). Compiling the whole model does not pay (new batch shapes recompile), so
this compiles only the regions between products, with dynamic shapes, and leaves the products and the attention
eager: the dropout + residual add + layer norm after every sub-layer, and the FFN's ReLU + dropout. Two variants:
``inductor`` (torch's dropout inside the compiled region, inductor's own random numbers) and ``ours`` (nmt's
dropout stays eager, so only the add + layer norm and the ReLU are compiled). The eager and compiled updates take
turns in blocks of the same batches, in one process.

    python benchmarks/train_fused_regions.py [--data data-bin/multi30k_en_de] [--rounds 8] [--dropout inductor]
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any, Callable

import click
import torch
import torch.nn.functional as F
from torch import Tensor
from train_throughput import batches_forever, build_ours  # noqa: E402  (a sibling script)


def patch_regions(inductor_dropout: bool) -> dict[str, bool]:
    """Route ``Residual.post`` and ``FeedForward.forward`` through compiled regions while the returned switch's
    ``"compiled"`` is True, and through nmt's own methods otherwise."""
    from nmt.models import layers
    from nmt.models.dropout import dropout

    switch = {"compiled": False}

    def add_norm(residual: Tensor, y: Tensor, weight: Tensor, bias: Tensor, p: float, training: bool,
                 pre: bool) -> Tensor:
        x = residual + (F.dropout(y, p, training) if inductor_dropout else y)
        return x if pre else F.layer_norm(x, (x.size(-1),), weight, bias)

    def relu_dropout(h: Tensor, p: float, training: bool) -> Tensor:
        return F.dropout(F.relu(h), p, training) if inductor_dropout else F.relu(h)

    add_norm_c: Callable[..., Tensor] = torch.compile(add_norm, dynamic=True)
    relu_dropout_c: Callable[..., Tensor] = torch.compile(relu_dropout, dynamic=True)

    eager_post, eager_ffn = layers.Residual.post, layers.FeedForward.forward  # nmt's own code, the eager arm

    def post(self: Any, residual: Tensor, y: Tensor) -> Tensor:
        if not switch["compiled"]:
            return eager_post(self, residual, y)
        if not inductor_dropout:
            y = dropout(y, self.dropout, self.training)
        return add_norm_c(residual, y, self.norm.weight, self.norm.bias, self.dropout, self.training,
                          self.normalize_before)

    def ffn(self: Any, x: Tensor) -> Tensor:
        if not switch["compiled"]:
            return eager_ffn(self, x)
        h = relu_dropout_c(self.fc1(x), self.activation_dropout, self.training)
        return self.fc2(h if inductor_dropout else dropout(h, self.activation_dropout, self.training))

    layers.Residual.post = post  # type: ignore[method-assign]
    layers.FeedForward.forward = ffn  # type: ignore[method-assign]
    return switch


@click.command(help=__doc__)
@click.option("--data", default="data-bin/multi30k_en_de", show_default=True)
@click.option("--rounds", default=8, show_default=True, help="Blocks of 10 updates, each run eagerly and compiled.")
@click.option("--dropout", "where", type=click.Choice(["inductor", "ours"]), default="inductor", show_default=True,
              help="inductor: torch's dropout inside the compiled regions; ours: nmt's dropout, eager.")
def main(data: str, rounds: int, where: str) -> None:
    switch = patch_regions(where == "inductor")
    run = build_ours(Path(data), Path("/tmp") / "nmt_bench_train", bf16=True)
    torch.manual_seed(1)
    batches = batches_forever(run)

    def block_wps(block: list[dict[str, Any]], compiled: bool) -> float:
        switch["compiled"] = compiled
        start = time.perf_counter()
        for sample in block:
            run.trainer.train_step([sample])
        return sum(int(s["ntokens"]) for s in block) / (time.perf_counter() - start)

    start = time.perf_counter()
    block_wps([next(batches) for _ in range(5)], True)
    print(f"first 5 compiled updates (compiling): {time.perf_counter() - start:.1f} s", flush=True)
    block_wps([next(batches) for _ in range(5)], False)
    wps: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        block = [next(batches) for _ in range(10)]
        for compiled in ((True, False) if r % 2 == 0 else (False, True)):
            wps[compiled].append(block_wps(block, compiled))
        print(f"round {r + 1}: compiled {wps[True][-1]:,.0f} wps, eager {wps[False][-1]:,.0f}", flush=True)
    on, off = statistics.median(wps[True]), statistics.median(wps[False])
    print(f"medians: compiled ({where} dropout) {on:,.0f} wps, eager {off:,.0f}: {on / off:.2f}x")


if __name__ == "__main__":
    main()
