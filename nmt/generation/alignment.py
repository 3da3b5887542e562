"""A translation's attention over its source, read in one teacher-forced pass, and the word alignment
taken from it (``--print-alignment``, ``--plot-attention``, the API's alignments)."""

from __future__ import annotations

from typing import Optional, Protocol

import torch


class AttentionModel(Protocol):
    """A model that gives every layer's attention weights of a teacher-forced pass
    (``nmt.models.transformer.TransformerModel.attention_weights``)."""

    def attention_weights(self, src_tokens: torch.Tensor, src_lengths: Optional[torch.Tensor],
                          prev_output_tokens: torch.Tensor) -> dict[str, list[torch.Tensor]]: ...


def teacher_forced_attention(model: AttentionModel, src_tokens: torch.Tensor, tokens: torch.Tensor, first: int
                             ) -> torch.Tensor:
    """(layers, heads, T, S) encoder-decoder attention of one translation: ``tokens`` (T,) fed back to the model
    after the decoder's ``first`` symbol, over ``src_tokens`` (S,), in one teacher-forced pass (the search never
    has to keep every head of every layer)."""
    prev = torch.cat([torch.tensor([first]), tokens[:-1]]).unsqueeze(0)  # (1, T)
    with torch.inference_mode():
        layers = model.attention_weights(src_tokens.unsqueeze(0), torch.tensor([len(src_tokens)]), prev)["cross"]
    return torch.stack([w[0].float() for w in layers])


def hard_alignment(attn: torch.Tensor, src_len: int) -> list[tuple[int, int]]:
    """(source position, target position) pairs: each target token but the eos to the source token
    (not the eos) it attends most. ``attn`` is (T, S) for one hypothesis; ``src_len`` counts the eos."""
    words = max(src_len - 1, 1)
    best = attn[:-1, :words].argmax(dim=1).tolist()  # (T-1,)
    return [(s, t) for t, s in enumerate(best)]
