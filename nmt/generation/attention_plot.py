"""Heatmaps of the encoder-decoder attention of a translation, one PNG per head of one layer.

The weights are recomputed with one teacher-forced pass over the best hypothesis (the model's
``attention_weights``), so the search itself never has to keep every head of every layer.
matplotlib is an optional extra (``pip install 'nmt[plot]'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from nmt.data.data_bin import DataDir
from nmt.errors import UsageError
from nmt.fileio import atomic_write
from nmt.generation.alignment import AttentionModel, teacher_forced_attention
from nmt.generation.search import Hypothesis


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--attention-plot needs matplotlib: pip install 'nmt[plot]' (or pip install matplotlib)") \
            from None
    return plt


def plot_cross_attention(model: AttentionModel, src_tokens: torch.Tensor, hyp: Hypothesis, data: DataDir, folder: str,
                         sid: int, first: int, layer: int = -1) -> list[Path]:
    """Save ``folder/sent{sid}_layer{L}_head{h}.png`` for every head of decoder layer ``layer``.

    ``src_tokens`` (S,) is the unpadded source (eos included); ``data`` gives the dictionaries; ``first`` is the
    decoder's first input (``nmt.generation.inference.first_decoder_input``: </s> for fairseq-imported models)."""
    plt = _pyplot()
    weights = teacher_forced_attention(model, src_tokens, hyp.tokens, first)  # (L, H, T, S)
    if not -len(weights) <= layer < len(weights):
        raise UsageError(f"--attention-layer {layer}: the decoder has {len(weights)} layers (use 0..{len(weights) - 1}"
                         " or -1 for the last)")
    attn = weights[layer]  # (H, T, S)
    src_labels = [data.src_dict[i] for i in src_tokens.tolist()]
    tgt_labels = [data.tgt_dict[i] for i in hyp.tokens.tolist()]
    out_dir = Path(folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    number = layer % len(weights)
    saved = []
    for head in range(attn.size(0)):
        fig, ax = plt.subplots(figsize=(max(4, 0.4 * len(src_labels)), max(3, 0.4 * len(tgt_labels))))
        ax.imshow(attn[head].numpy(), cmap="viridis", aspect="auto", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(len(src_labels)), src_labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(tgt_labels)), tgt_labels, fontsize=7)
        ax.set_title(f"sentence {sid}, layer {number}, head {head}", fontsize=8)
        fig.tight_layout()
        path = out_dir / f"sent{sid}_layer{number}_head{head}.png"
        with atomic_write(path, "wb") as f:  # an interrupted run never leaves half an image
            fig.savefig(f, format="png", dpi=100)
        plt.close(fig)
        saved.append(path)
    return saved
