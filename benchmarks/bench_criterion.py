"""Time the label-smoothed loss (forward + backward) on (N, V) logits: nmt's one-buffer autograd
function against the textbook log_softmax chain and torch's cross_entropy, in fp32 and from bf16
logits; then the whole criterion with the vocabulary projection of only the non-pad positions
against projecting every position. Prints milliseconds (best of N; on a shared machine compare
within one run).

    python -m benchmarks run bench_criterion [--tokens 2048] [--vocab 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import time
from typing import Any, Callable

import torch

from nmt.plugin_loader import load_plugins
from nmt.training.criterion import build_criterion, label_smoothed_nll_loss


def log_softmax_form(logits: torch.Tensor, target: torch.Tensor, eps: float) -> torch.Tensor:
    lprobs = torch.log_softmax(logits.float(), dim=-1)  # (N, V) kept for backward
    nll = -lprobs.gather(-1, target[:, None]).sum()
    eps_i = eps / (lprobs.size(-1) - 1)
    return (1 - eps - eps_i) * nll + eps_i * -lprobs.sum()


def cross_entropy_form(logits: torch.Tensor, target: torch.Tensor, eps: float) -> torch.Tensor:
    """torch's fused loss; label_smoothing V*eps/(V-1) is fairseq's eps (but gives no separate nll)."""
    vocab = logits.size(-1)
    return torch.nn.functional.cross_entropy(logits.float(), target, reduction="sum",
                                             label_smoothing=vocab * eps / (vocab - 1))


def timed(fn: Callable[..., Any], logits: torch.Tensor, target: torch.Tensor, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        x = logits.detach().requires_grad_(True)
        t0 = time.perf_counter()
        out = fn(x, target, 0.1)
        loss = out[0] if isinstance(out, tuple) else out
        loss.backward()
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def main(argv: list[str]) -> str:
    parser = argparse.ArgumentParser(prog="bench_criterion", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    target = torch.randint(0, args.vocab, (args.tokens,))
    loss_ms: dict[str, float] = {}
    for dtype in (torch.float32, torch.bfloat16):
        logits = torch.randn(args.tokens, args.vocab).to(dtype)
        for name, fn in (("nmt fused", label_smoothed_nll_loss), ("log_softmax", log_softmax_form),
                         ("F.cross_entropy", cross_entropy_form)):
            ms = timed(fn, logits, target, args.repeats)
            loss_ms[f"{str(dtype).split('.')[-1]} {name}"] = ms
            print(f"{str(dtype):15s} {name:16s} N={args.tokens} V={args.vocab}: {ms:7.1f} ms fwd+bwd "
                  f"(best of {args.repeats})")
    projection_ms = criterion_projection(args)
    return (f"N={args.tokens} V={args.vocab}, ms fwd+bwd: " + ", ".join(f"{k} {v:.1f}" for k, v in loss_ms.items())
            + "; criterion " + ", ".join(f"{k} {v:.1f}" for k, v in projection_ms.items()))


class Projection(torch.nn.Module):
    """The last layer of a decoder: fixed features, a trainable output projection."""

    def __init__(self, features: torch.Tensor, vocab: int):
        super().__init__()
        self.features = features  # (B, T, C)
        self.out = torch.nn.Linear(features.size(-1), vocab, bias=False)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, features_only=False):
        return self.features if features_only else self.out(self.features)

    def output_layer(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x)


def criterion_projection(args: argparse.Namespace, pad_fraction: float = 0.1, dim: int = 256) -> dict[str, float]:
    """ms of the whole criterion's forward + backward, projecting the non-pad positions and all of them."""
    load_plugins()
    batch, length = 32, args.tokens // 32
    target = torch.randint(4, args.vocab, (batch, length))
    lengths = (length * (1 - pad_fraction * 2 * torch.rand(batch))).long().clamp(min=1)  # ~pad_fraction padding
    target[torch.arange(length)[None, :] >= lengths[:, None]] = 1
    sample: dict[str, Any] = {"target": target, "ntokens": int(target.ne(1).sum()), "nsentences": batch,
              "net_input": {"src_tokens": target, "src_lengths": lengths, "prev_output_tokens": target}}
    model = Projection(torch.randn(batch, length, dim), args.vocab)
    padding = 1 - sample["ntokens"] / target.numel()
    times = {}
    for name, extra in (("non-pad projection", {}), ("full projection", {"project_all_positions": True})):
        crit = build_criterion({"name": "label_smoothed_cross_entropy", **extra}, 1)
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            crit(model, sample)[0].backward()
            best = min(best, time.perf_counter() - t0)
        times[name] = best * 1000
        print(f"criterion {name:19s} B={batch} T={length} C={dim} V={args.vocab}, {padding:.0%} padding: "
              f"{best * 1000:7.1f} ms fwd+bwd")
    return times
