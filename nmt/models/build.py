"""Building a model: :func:`build_model` asks the ``--arch`` plugin for it, and the built-in
architectures call :func:`build_transformer`, which picks the attention plugin of each site and the
positional plugin of each side, checks embedding sharing, and initialises weights (xavier-uniform
projections inside the modules; embeddings normal(0, d^-0.5), pad row zero)."""

from __future__ import annotations

from typing import Any, Optional, Protocol, cast

import torch
from torch import nn

from nmt.config.model import ATTENTION_SITES, POSITIONAL_SIDES, ModelConfig
from nmt.errors import ConfigError
from nmt.fields import to_dataclass
from nmt.models.attention import AttentionBase
from nmt.models.layers import DecoderLayer, EncoderLayer, FeedForward
from nmt.models.transformer import Embedder, TransformerDecoder, TransformerEncoder, TransformerModel
from nmt.registry import ARCH, ATTENTION, POSITIONAL

DEFAULT_ATTENTION = ModelConfig().attention["name"]


class ModelVocabulary(Protocol):
    """What building a model asks of a dictionary (``nmt.data.dictionary.Dictionary``): its size and pad index.
    A ``fingerprint()`` method, when it has one, tells a joined dictionary from two of the same size."""

    def __len__(self) -> int: ...

    def pad(self) -> int: ...


def new_embedding(num: int, dim: int, pad: int) -> nn.Embedding:
    emb = nn.Embedding(num, dim, padding_idx=pad)
    nn.init.normal_(emb.weight, mean=0.0, std=dim ** -0.5)
    with torch.no_grad():
        emb.weight[pad].zero_()
    return emb


def attention_groups(cfg: ModelConfig) -> dict[str, dict[str, Any]]:
    """site -> attention plugin group. A self-attention-only plugin (restricted) given with --attention
    for every site leaves the encoder-decoder site on the default attention."""
    groups = {site: cfg.attention_for(site) for site in ATTENTION_SITES}
    cross = groups["cross"]
    if cfg.cross_attention.get("name") is None and not ATTENTION.get(cross["name"]).supports_cross_attention:
        own = {k: v for k, v in cfg.cross_attention.items() if k != "name"}
        groups["cross"] = {"name": DEFAULT_ATTENTION, **own}
    return groups


def _attention(group: dict[str, Any], site: str, dim: int, heads: int, dropout: float, *,
               self_attention: bool, causal: bool, key_dim: Optional[int] = None) -> AttentionBase:
    """The attention plugin of ``site``. ``key_dim`` (--attention-key-dim) is passed on only when it
    differs from d_model / heads, so a model without it is built exactly as before the option existed."""
    extra: dict[str, Any] = {}
    if not self_attention and not ATTENTION.get(group["name"]).supports_cross_attention:
        raise ConfigError(f"--{site}-attention {group['name']}: attention '{group['name']}' is for self-attention "
                          f"only; choose another --{site}-attention (e.g. {DEFAULT_ATTENTION})")
    if key_dim is not None and key_dim != dim // heads:
        if not ATTENTION.get(group["name"]).supports_key_dim:
            raise ConfigError(f"--attention-key-dim {key_dim}: the {site} attention '{group['name']}' takes "
                              f"queries, keys and values of one size (d_model / heads = {dim // heads}); drop "
                              f"--attention-key-dim or choose another --{site}-attention")
        extra["key_dim"] = key_dim
    try:
        return ATTENTION.build(group["name"], group, dim, heads, self_attention=self_attention, causal=causal,
                               dropout=dropout, **extra)
    except ConfigError as e:
        raise ConfigError(f"{site} attention: {e}") from None


def _check_shared_dicts(src_dict: ModelVocabulary, tgt_dict: ModelVocabulary) -> None:
    fp_src, fp_tgt = (getattr(d, "fingerprint", None) for d in (src_dict, tgt_dict))
    same = len(src_dict) == len(tgt_dict) and src_dict.pad() == tgt_dict.pad()
    if same and fp_src and fp_tgt:
        same = fp_src() == fp_tgt()
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


def build_model(cfg: ModelConfig | dict[str, Any], src_dict: ModelVocabulary, tgt_dict: ModelVocabulary
                ) -> nn.Module:
    """The model of ``cfg`` (a ModelConfig, a dict or an omegaconf node of its values), built by its
    ``--arch`` plugin."""
    model_cfg: ModelConfig = to_dataclass(ModelConfig, cfg)
    return ARCH.build(model_cfg.arch["name"], model_cfg.arch).build_model(model_cfg, src_dict, tgt_dict)


def build_transformer(cfg: ModelConfig, src_dict: ModelVocabulary, tgt_dict: ModelVocabulary) -> TransformerModel:
    """The Transformer of ``cfg`` (the built-in architectures' model)."""
    _check_shape(cfg)
    attn = attention_groups(cfg)
    pos = {side: cfg.positional_for(side) for side in POSITIONAL_SIDES}
    dim = cfg.encoder_embed_dim

    src_embed = new_embedding(len(src_dict), dim, src_dict.pad())
    if cfg.share_all_embeddings:
        _check_shared_dicts(src_dict, tgt_dict)
        tgt_embed = src_embed
    else:
        tgt_embed = new_embedding(len(tgt_dict), cfg.decoder_embed_dim, tgt_dict.pad())
    if cfg.share_all_embeddings or cfg.share_decoder_input_output_embed:
        output_weight = cast(nn.Parameter, tgt_embed.weight)  # an nn.Embedding's weight (typed as a Tensor)
    else:
        output_weight = nn.Parameter(torch.empty(len(tgt_dict), cfg.decoder_embed_dim))
        nn.init.normal_(output_weight, mean=0.0, std=cfg.decoder_embed_dim ** -0.5)

    def embedder(embed: nn.Embedding, side: str, max_positions: int, option: str) -> Embedder:
        positional = POSITIONAL.build(pos[side]["name"], pos[side], embed.embedding_dim, max_positions, option)
        return Embedder(embed, positional, cfg.dropout, scale=not cfg.no_scale_embedding,
                        word_dropout=cfg.word_dropout)

    def ffn(side: str) -> FeedForward:
        return FeedForward(getattr(cfg, f"{side}_embed_dim"), getattr(cfg, f"{side}_ffn_embed_dim"),
                           cfg.activation_fn, cfg.activation_dropout)

    def final_norm(side: str) -> Optional[nn.LayerNorm]:
        return nn.LayerNorm(getattr(cfg, f"{side}_embed_dim")) if getattr(cfg, f"{side}_normalize_before") else None

    eh, dh, p = cfg.encoder_attention_heads, cfg.decoder_attention_heads, cfg.attention_dropout
    ddim, dk = cfg.decoder_embed_dim, cfg.attention_key_dim
    enc_layers = [
        EncoderLayer(_attention(attn["encoder"], "encoder", dim, eh, p, self_attention=True, causal=False,
                                key_dim=dk),
                     ffn("encoder"), dim, cfg.dropout, cfg.encoder_normalize_before)
        for _ in range(cfg.encoder_layers)
    ]
    dec_layers = [
        DecoderLayer(_attention(attn["decoder"], "decoder", ddim, dh, p, self_attention=True, causal=True,
                                key_dim=dk),
                     _attention(attn["cross"], "cross", ddim, dh, p, self_attention=False, causal=False,
                                key_dim=dk),
                     ffn("decoder"), ddim, cfg.dropout, cfg.decoder_normalize_before)
        for _ in range(cfg.decoder_layers)
    ]
    encoder = TransformerEncoder(embedder(src_embed, "encoder", cfg.max_source_positions, "--max-source-positions"),
                                 enc_layers, final_norm("encoder"), src_dict.pad())
    decoder = TransformerDecoder(embedder(tgt_embed, "decoder", cfg.max_target_positions, "--max-target-positions"),
                                 dec_layers, final_norm("decoder"), output_weight)
    plugins = {f"{site}_attention": group["name"] for site, group in attn.items()}
    plugins.update({f"{side}_positional": group["name"] for side, group in pos.items()})
    return TransformerModel(encoder, decoder, plugins, cfg)
