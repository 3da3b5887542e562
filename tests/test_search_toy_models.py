"""Stand-in models with the decoder contract of nmt/models (encoder, decoder with an incremental
state, reorder_*), small enough that a search's result can be worked out by hand.

Both check the cache contract: the state remembers the prefix it was fed and every step
asserts that the prefix it is given extends it, so a wrong reorder in a search fails loudly.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

BOS, PAD, EOS, UNK = 0, 1, 2, 3
VOCAB = 16


class _Specials:
    """The four special indices, as a Dictionary gives them."""

    def bos(self) -> int: return BOS
    def pad(self) -> int: return PAD
    def eos(self) -> int: return EOS
    def unk(self) -> int: return UNK


SPECIALS = _Specials()


class _CachedDecoderMixin:
    def _check_and_extend(self, prev: torch.Tensor, state: dict | None) -> None:
        if state is None:
            return
        seen = state.get("prefix")
        if seen is not None:
            assert torch.equal(seen, prev[:, :-1]), "cache out of step with the prefix (bad reorder)"
        state["prefix"] = prev.clone()
        state["calls"] = state.get("calls", 0) + 1

    def reorder_encoder_out(self, enc: dict, order: torch.Tensor) -> dict:
        return {k: v.index_select(0, order) for k, v in enc.items()}

    def reorder_incremental_state(self, state: dict, order: torch.Tensor) -> None:
        for key, value in list(state.items()):
            if isinstance(value, torch.Tensor):
                state[key] = value.index_select(0, order)


class TableModel(_CachedDecoderMixin, nn.Module):
    """Next-token probabilities read from a table keyed by the generated prefix (a tuple of
    ids, bos excluded); prefixes not in the table get ``default``. The source is ignored."""

    def __init__(self, table: dict[tuple, dict[int, float]], default: dict[int, float] | None = None):
        super().__init__()
        self.table = table
        self.default = default or {EOS: 1.0}
        self.max_target_positions = 64

    def encoder(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> dict:
        return {"src": src_tokens}

    def _row(self, prefix: tuple) -> torch.Tensor:
        probs = self.table.get(prefix, self.default)
        logits = torch.full((VOCAB,), -1e9)
        for tok, p in probs.items():
            logits[tok] = math.log(p)
        return logits

    def decoder(self, prev: torch.Tensor, enc: dict, incremental_state: dict | None = None) -> torch.Tensor:
        self._check_and_extend(prev, incremental_state)
        rows = [self._row(tuple(r[1:].tolist())) for r in prev]
        return torch.stack(rows).unsqueeze(1)  # (N, 1, V)


class TinyNeuralModel(_CachedDecoderMixin, nn.Module):
    """A randomly initialised model: logits = W tanh(mean source embedding + sum of prefix
    embeddings + position). The source mean ignores padding, so batching must not change it."""

    def __init__(self, seed: int = 0, dim: int = 8, vocab: int = VOCAB):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.emb_src = nn.Parameter(torch.randn(vocab, dim, generator=g))
        self.emb_tgt = nn.Parameter(torch.randn(vocab, dim, generator=g))
        self.pos = nn.Parameter(torch.randn(64, dim, generator=g) * 0.5)
        self.out = nn.Parameter(torch.randn(dim, vocab, generator=g) * 2)
        self.max_target_positions = 64

    def encoder(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> dict:
        mask = (src_tokens != PAD).unsqueeze(-1).float()  # (B, S, 1)
        mean = (self.emb_src[src_tokens] * mask).sum(1) / mask.sum(1)  # (B, D)
        return {"mean": mean}

    def decoder(self, prev: torch.Tensor, enc: dict, incremental_state: dict | None = None) -> torch.Tensor:
        self._check_and_extend(prev, incremental_state)
        t = prev.size(1)
        if incremental_state is not None:
            acc = incremental_state.get("acc", torch.zeros_like(enc["mean"])) + self.emb_tgt[prev[:, -1]]
            incremental_state["acc"] = acc
            h = torch.tanh(enc["mean"] + acc + self.pos[t - 1])  # (N, D)
            return (h @ self.out).unsqueeze(1)  # (N, 1, V)
        acc = self.emb_tgt[prev].cumsum(1)  # (N, T, D)
        h = torch.tanh(enc["mean"].unsqueeze(1) + acc + self.pos[:t])  # (N, T, D)
        return h @ self.out  # (N, T, V)


def test_tiny_model_cached_equals_full_prefix():
    model = TinyNeuralModel()
    src = torch.tensor([[5, 6, 7, EOS]])
    enc = model.encoder(src, torch.tensor([4]))
    prev = torch.tensor([[BOS, 8, 9, 10]])
    full = model.decoder(prev, enc)  # (1, 4, V)
    state: dict = {}
    steps = [model.decoder(prev[:, : t + 1], enc, state)[:, -1] for t in range(4)]
    assert torch.allclose(full[0], torch.cat(steps), atol=1e-6)
