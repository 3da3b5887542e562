"""Time one optimizer step over Transformer-like parameter shapes with torch's three kernels:
the per-parameter loop, foreach (multi-tensor) and fused; print milliseconds per step."""

from __future__ import annotations

import argparse
import functools
import time

import torch


def transformer_like_params(dim: int, layers: int, vocab: int) -> list[torch.nn.Parameter]:
    shapes = [(vocab, dim)]
    for _ in range(layers):
        shapes += [(3 * dim, dim), (3 * dim,), (dim, dim), (dim,), (4 * dim, dim), (4 * dim,), (dim, 4 * dim),
                   (dim,), (dim,), (dim,), (dim,), (dim,)]
    params = [torch.nn.Parameter(torch.randn(s) * 0.02) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    return params


def time_step(make, params: list[torch.nn.Parameter], steps: int) -> float:
    opt = make(params)
    opt.step()  # allocate state
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.step()
    return (time.perf_counter() - t0) / steps * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=10000)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    params = transformer_like_params(args.dim, args.layers, args.vocab)
    count = sum(p.numel() for p in params)
    for name, cls in (("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW), ("sgd", torch.optim.SGD)):
        extra = {"betas": (0.9, 0.98), "eps": 1e-9} if name != "sgd" else {"momentum": 0.9}
        for kernel in ({"foreach": False}, {"foreach": True}, {"fused": True}):
            try:
                ms = time_step(functools.partial(cls, lr=1e-3, **extra, **kernel), params, args.steps)
            except (RuntimeError, TypeError) as e:
                print(f"{name:5s} {kernel}: unavailable ({str(e).splitlines()[0]})")
                continue
            print(f"{name:5s} {str(kernel):18s} {count / 1e6:.1f}M params: {ms:7.2f} ms/step")


if __name__ == "__main__":
    main()
