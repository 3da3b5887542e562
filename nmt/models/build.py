"""build_model: the one place a model is made from its config and dictionaries. It picks the
attention / positional plugins per role, checks embedding sharing, and initialises weights
(xavier-uniform projections inside the modules; embeddings normal(0, d^-0.5), pad row zero)."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch
from torch import nn

from nmt.config.model import ModelConfig, arch_preset  # noqa: F401  (arch_preset re-exported)
from nmt.errors import ConfigError
from nmt.models.attention import AttentionBase
from nmt.models.layers import DecoderLayer, EncoderLayer, FeedForward
from nmt.models.transformer import Embedder, TransformerDecoder, TransformerEncoder, TransformerModel
from nmt.registry import ATTENTION, POSITIONAL, to_dataclass

DEFAULT_ATTENTION = next(f.default for f in dataclasses.fields(ModelConfig) if f.name == "attention")


def new_embedding(num: int, dim: int, pad: int) -> nn.Embedding:
    emb = nn.Embedding(num, dim, padding_idx=pad)
    nn.init.normal_(emb.weight, mean=0.0, std=dim ** -0.5)
    with torch.no_grad():
        emb.weight[pad].zero_()
    return emb


def attention_names(cfg: ModelConfig) -> dict[str, str]:
    """role -> attention plugin name. A plugin that is self-attention only (restricted) chosen
    with --attention for all roles leaves the encoder-decoder role on the default attention."""
    names = {role: cfg.attention_for(role) for role in ("encoder", "decoder", "cross")}
    if cfg.cross_attention is None and not getattr(ATTENTION.get(names["cross"]), "supports_cross_attention", True):
        names["cross"] = DEFAULT_ATTENTION
    return names


def _attention(name: str, dim: int, heads: int, cfg: ModelConfig, *, self_attention: bool,
               causal: bool) -> AttentionBase:
    cls = ATTENTION.get(name)
    module = cls(dim, heads, self_attention=self_attention, causal=causal, dropout=cfg.attention_dropout, cfg=cfg)
    if not isinstance(module, AttentionBase):
        raise ConfigError(f'attention plugin "{name}" ({ATTENTION.entry(name).origin}) must subclass '
                          "nmt.models.attention.AttentionBase")
    return module


def _check_shared_dicts(src_dict: Any, tgt_dict: Any) -> None:
    fp = [getattr(d, "fingerprint", None) for d in (src_dict, tgt_dict)]
    same = len(src_dict) == len(tgt_dict) and src_dict.pad() == tgt_dict.pad()
    if same and all(fp):
        same = fp[0]() == fp[1]()
    if not same:
        raise ConfigError("--share-all-embeddings needs one joined dictionary for source and target, but they "
                          f"differ ({len(src_dict)} vs {len(tgt_dict)} symbols); re-run nmt-preprocess with "
                          "--joined-dictionary or drop --share-all-embeddings")


def _check_shape(cfg: ModelConfig) -> None:
    for side in ("encoder", "decoder"):
        dim, heads = getattr(cfg, f"{side}_embed_dim"), getattr(cfg, f"{side}_attention_heads")
        if heads <= 0 or dim % heads:
            raise ConfigError(f"--{side}-embed-dim {dim} must be divisible by --{side}-attention-heads {heads}")
        if getattr(cfg, f"{side}_layers") < 1:
            raise ConfigError(f"--{side}-layers must be at least 1")
    if cfg.encoder_embed_dim != cfg.decoder_embed_dim:
        raise ConfigError(f"--encoder-embed-dim {cfg.encoder_embed_dim} and --decoder-embed-dim "
                          f"{cfg.decoder_embed_dim} must be equal (cross-attention mixes them)")


def build_model(cfg: ModelConfig | dict, src_dict: Any, tgt_dict: Any) -> TransformerModel:
    """A TransformerModel for ``cfg`` (a ModelConfig, a dict or an omegaconf node of its values).

    Dictionaries need ``len()`` and ``.pad()`` (and ``fingerprint()`` to be compared exactly)."""
    cfg = to_dataclass(ModelConfig, cfg)
    _check_shape(cfg)
    attn = attention_names(cfg)
    pos = {side: cfg.positional_for(side) for side in ("encoder", "decoder")}
    dim = cfg.encoder_embed_dim

    src_embed = new_embedding(len(src_dict), dim, src_dict.pad())
    if cfg.share_all_embeddings:
        _check_shared_dicts(src_dict, tgt_dict)
        tgt_embed = src_embed
    else:
        tgt_embed = new_embedding(len(tgt_dict), cfg.decoder_embed_dim, tgt_dict.pad())
    if cfg.share_all_embeddings or cfg.share_decoder_input_output_embed:
        output_weight = tgt_embed.weight
    else:
        output_weight = nn.Parameter(torch.empty(len(tgt_dict), cfg.decoder_embed_dim))
        nn.init.normal_(output_weight, mean=0.0, std=cfg.decoder_embed_dim ** -0.5)

    def embedder(embed: nn.Embedding, side: str, max_positions: int, option: str) -> Embedder:
        positional = POSITIONAL.get(pos[side])(embed.embedding_dim, max_positions, option)
        return Embedder(embed, positional, cfg.dropout, scale=not cfg.no_scale_embedding)

    def ffn(side: str) -> FeedForward:
        return FeedForward(getattr(cfg, f"{side}_embed_dim"), getattr(cfg, f"{side}_ffn_embed_dim"),
                           cfg.activation_fn, cfg.activation_dropout)

    def final_norm(side: str) -> Optional[nn.LayerNorm]:
        return nn.LayerNorm(getattr(cfg, f"{side}_embed_dim")) if getattr(cfg, f"{side}_normalize_before") else None

    eh, dh, ddim = cfg.encoder_attention_heads, cfg.decoder_attention_heads, cfg.decoder_embed_dim
    enc_layers = [
        EncoderLayer(_attention(attn["encoder"], dim, eh, cfg, self_attention=True, causal=False), ffn("encoder"),
                     dim, cfg.dropout, cfg.encoder_normalize_before)
        for _ in range(cfg.encoder_layers)
    ]
    dec_layers = [
        DecoderLayer(_attention(attn["decoder"], ddim, dh, cfg, self_attention=True, causal=True),
                     _attention(attn["cross"], ddim, dh, cfg, self_attention=False, causal=False),
                     ffn("decoder"), ddim, cfg.dropout, cfg.decoder_normalize_before)
        for _ in range(cfg.decoder_layers)
    ]
    encoder = TransformerEncoder(embedder(src_embed, "encoder", cfg.max_source_positions,
                                          "model.max_source_positions"),
                                 enc_layers, final_norm("encoder"), src_dict.pad())
    decoder = TransformerDecoder(embedder(tgt_embed, "decoder", cfg.max_target_positions,
                                          "model.max_target_positions"),
                                 dec_layers, final_norm("decoder"), output_weight)
    plugins = {f"{role}_attention": name for role, name in attn.items()}
    plugins.update({f"{side}_positional": name for side, name in pos.items()})
    return TransformerModel(encoder, decoder, plugins, cfg)
