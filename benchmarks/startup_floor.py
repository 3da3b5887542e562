"""The start-up floor of any PyTorch trainer: launch -> first update of a stock ``torch.nn.Transformer`` of the
fairseq reference shape, with no data to read, no framework and no checks.

``train_startup_vs_fairseq.py`` runs it in turn with nmt-train and fairseq-train, so that their start-up
times can be read against what Python, ``import torch``, ``torch.optim``'s own import of ``torch._dynamo``
(its ``Optimizer`` methods are wrapped in ``torch._disable_dynamo``, which imports it on the first call) and
one first forward and backward cost on this machine before any data is touched. It prints the two marker
lines that script reads (``startup_floor: built`` once the model and optimizer are built, ``num_updates=1,``
after the first update) and where the time went.

    python benchmarks/startup_floor.py [--optimizer adam|none]
"""

from __future__ import annotations

import argparse  # a benchmark script, not an nmt command: no config dataclass needed
import time

START = time.perf_counter()

VOCAB, DIM, HEADS, LAYERS, FFN = 9808, 256, 4, 3, 1024   # the fairseq reference shape (8M parameters)
BATCH, LENGTH = 128, 32                                    # 4,096 target tokens, --max-tokens 4096


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--optimizer", choices=["adam", "none"], default="adam",
                    help="adam: torch.optim.Adam (fused), as nmt and fairseq use; none: the floor without it")
    args = ap.parse_args()
    import torch

    imported = time.perf_counter()
    torch.manual_seed(1)
    embed = torch.nn.Embedding(VOCAB, DIM)
    model = torch.nn.Transformer(DIM, HEADS, LAYERS, LAYERS, FFN, dropout=0.1, batch_first=True)
    params = [*embed.parameters(), *model.parameters()]
    optimizer = torch.optim.Adam(params, lr=5e-4, betas=(0.9, 0.98), fused=True) if args.optimizer == "adam" else None
    built = time.perf_counter()
    print("startup_floor: built", flush=True)
    src, tgt = torch.randint(VOCAB, (BATCH, LENGTH)), torch.randint(VOCAB, (BATCH, LENGTH))
    mask = torch.nn.Transformer.generate_square_subsequent_mask(LENGTH)
    features = model(embed(src), embed(tgt), tgt_mask=mask)
    loss = torch.nn.functional.cross_entropy(features.reshape(-1, DIM) @ embed.weight.t(), tgt.reshape(-1))
    loss.backward()
    if optimizer is not None:
        optimizer.step()
    done = time.perf_counter()
    print(f"startup_floor: num_updates=1, import torch {imported - START:.2f} s, model and optimizer "
          f"{built - imported:.2f} s, first update {done - built:.2f} s", flush=True)


if __name__ == "__main__":
    main()
