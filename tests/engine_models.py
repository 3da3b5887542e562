"""Tiny models for the engine tests (nmt.engines): trained for a moment on a copy task, so that their searches
end with eos at different lengths and their distributions are peaked (a random model's near-ties would let
rounding pick another hypothesis), and searches that record every step's log-probabilities."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import nmt.plugins.search.beam  # noqa: F401  (registers the strategies)
import nmt.plugins.search.greedy  # noqa: F401
from fake_dictionary import PAD
from nmt.config.generate import GenerationConfig
from nmt.generation.ensemble import EnsembleModel
from nmt.generation.search import build_search
from test_model_transformer import tiny
from test_search_toy_models import BOS, EOS, SPECIALS

SRC_VOCAB = 24  # tiny()'s dictionaries
# (attention, positional, other model options): every built-in attention and positional plugin, pre-norm,
# --attention-key-dim and an additive encoder-decoder attention
LAYOUTS = [
    ("scaled_dot_product", "sinusoidal", {}),
    ("additive", "learned", {}),
    ("restricted", "sinusoidal", {}),
    ("relative", "none", {}),
    ("scaled_dot_product", "fairseq_sinusoidal", {"encoder_normalize_before": True, "decoder_normalize_before": True}),
    ("scaled_dot_product", "learned", {"attention_key_dim": 4}),
    ("relative", "sinusoidal", {"cross_attention": "additive"}),
]


def copy_batch(n: int, seed: int, min_len: int = 2, max_len: int = 9) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded sources (n, S) of random tokens ending in eos, and their lengths."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=g)
    src = torch.full((n, int(lengths.max()) + 1), PAD, dtype=torch.long)
    for i, length in enumerate(lengths.tolist()):
        src[i, :length] = torch.randint(4, SRC_VOCAB, (length,), generator=g)
        src[i, length] = EOS
    return src, lengths + 1


def trained_tiny(attention: str, positional: str, updates: int = 80, **options) -> torch.nn.Module:
    """tiny() of this layout in fp32 after ``updates`` Adam steps on copying its source (eval mode)."""
    if attention == "relative":
        attention_group = {"name": "relative", "max_relative_position": 3}  # clipped within the sentences
    else:
        attention_group = {"name": attention}
    model = tiny(attention=attention_group, positional=positional, **options).float().train()  # restricted: r = 2
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    for step in range(updates):
        src, _ = copy_batch(16, seed=1000 + step)
        target = src  # the copy, eos included
        prev = torch.cat([torch.full((src.size(0), 1), BOS), target[:, :-1]], dim=1).masked_fill(target == PAD, PAD)
        loss = F.cross_entropy(model(src, None, prev).flatten(0, 1), target.flatten(), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def recorded_search(member: object, src: torch.Tensor, lengths: torch.Tensor, **options):
    """The search's hypotheses over ``member`` (a model or an engine's StepMember) and the log-probabilities
    (N, V) of each of its steps, in order."""
    cfg = GenerationConfig(**{"max_len_a": 1.5, "max_len_b": 3, **options})
    ens = EnsembleModel([member])
    steps: list[torch.Tensor] = []
    plain_step = ens.step

    def step(*args, **kwargs):
        lprobs, attn = plain_step(*args, **kwargs)
        steps.append(lprobs.clone())  # searches change them in place
        return lprobs, attn

    ens.step = step  # type: ignore[method-assign]
    return build_search(cfg, SPECIALS).search(ens, src, lengths), steps


def outputs(hyps) -> list[list[list[int]]]:
    """Each sentence's hypotheses as token lists."""
    return [[h.tokens.tolist() for h in sentence] for sentence in hyps]
