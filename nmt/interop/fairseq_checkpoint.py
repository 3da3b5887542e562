"""A fairseq ``transformer`` checkpoint as an nmt checkpoint (``nmt-import-fairseq checkpoint``).

What maps exactly (and is therefore imported): encoder/decoder layers of any fairseq Transformer
architecture (the args hold the resolved sizes), post- or pre-norm (``*_normalize_before``, with
the final LayerNorm of a pre-norm stack), separate or shared embeddings, the tied output
projection, sinusoidal positions (our ``fairseq_sinusoidal`` plugin: concatenated sin|cos halves,
positions numbered from pad + 1) or learned ones (fairseq's table minus its pad + 1 leading rows),
and the decoder starting from ``</s>``. Every other option that changes the computation is refused
by name, and so is any weight left over after the mapping.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Callable, cast

import torch

from nmt.config.model import ModelConfig
from nmt.data.dictionary import Dictionary
from nmt.errors import DataError, UsageError
from nmt.interop.fairseq_unpickle import fairseq_model_args, load_fairseq_file

# fairseq's architectures of model "transformer" (fairseq/models/transformer/transformer_legacy.py):
# they differ only in defaults, which the stored args already resolve.
TRANSFORMER_ARCHS = frozenset({
    "transformer", "transformer_tiny", "transformer_iwslt_de_en", "transformer_wmt_en_de",
    "transformer_vaswani_wmt_en_de_big", "transformer_vaswani_wmt_fr_en_big", "transformer_wmt_en_de_big",
    "transformer_wmt_en_de_big_t2t",
})
PAD_OFFSET = 2  # fairseq's learned/sinusoidal positions start at padding_idx + 1

# option -> (is the value one we can map?, what we can map). Options absent from old args count as off.
_UNSUPPORTED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "layernorm_embedding": (lambda v: not v, "False"),
    "no_token_positional_embeddings": (lambda v: not v, "False"),
    "adaptive_input": (lambda v: not v, "False"),
    "adaptive_softmax_cutoff": (lambda v: not v, "None"),
    "tie_adaptive_weights": (lambda v: not v, "False"),
    "cross_self_attention": (lambda v: not v, "False"),
    "no_cross_attention": (lambda v: not v, "False"),
    "no_decoder_final_norm": (lambda v: not v, "False"),
    "encoder_layers_to_keep": (lambda v: not v, "None"),
    "decoder_layers_to_keep": (lambda v: not v, "None"),
    "encoder_embed_path": (lambda v: not v, "None"),
    "decoder_embed_path": (lambda v: not v, "None"),
    "activation_fn": (lambda v: v in (None, "relu", "gelu"), "relu or gelu"),
    "quant_noise_pq": (lambda v: not v, "0"),
}


def _refuse(path: Path, what: str) -> DataError:
    return DataError(f"fairseq checkpoint {path}: {what}; nmt cannot reproduce it exactly, so it is not imported "
                     "(docs/fairseq.md lists what is supported)")


_REQUIRED = ("encoder_embed_dim", "encoder_ffn_embed_dim", "decoder_ffn_embed_dim", "encoder_layers",
             "decoder_layers", "encoder_attention_heads", "decoder_attention_heads")


def model_config_from_fairseq(args: dict[str, Any], path: Path) -> ModelConfig:
    """Our ModelConfig for fairseq model options ``args``; refuses what does not map exactly."""
    arch = args.get("arch") or args.get("_name")
    if arch not in TRANSFORMER_ARCHS:
        raise _refuse(path, f"architecture {arch!r} is not a fairseq transformer "
                            f"(importable: {', '.join(sorted(TRANSFORMER_ARCHS))})")
    missing = [k for k in _REQUIRED if k not in args]
    if missing:
        raise DataError(f"fairseq checkpoint {path}: its model options lack {', '.join(missing)}; give the "
                        "checkpoint as fairseq-train wrote it")
    for option, (ok, allowed) in _UNSUPPORTED.items():
        if not ok(args.get(option)):
            raise _refuse(path, f"option --{option.replace('_', '-')} is {args[option]!r} (supported: {allowed})")
    dim = args["encoder_embed_dim"]
    for option in ("decoder_embed_dim", "decoder_input_dim", "decoder_output_dim"):
        if args.get(option, dim) != dim:
            raise _refuse(path, f"option --{option.replace('_', '-')} is {args[option]} but --encoder-embed-dim "
                                f"is {dim} (projected embeddings)")
    learned = {side: bool(args.get(f"{side}_learned_pos")) for side in ("encoder", "decoder")}
    return ModelConfig(
        arch={"name": "transformer_base"},  # a registered preset name; every field below overrides it
        encoder_embed_dim=dim, decoder_embed_dim=dim,
        encoder_ffn_embed_dim=args["encoder_ffn_embed_dim"], decoder_ffn_embed_dim=args["decoder_ffn_embed_dim"],
        encoder_layers=args["encoder_layers"], decoder_layers=args["decoder_layers"],
        encoder_attention_heads=args["encoder_attention_heads"],
        decoder_attention_heads=args["decoder_attention_heads"],
        encoder_normalize_before=bool(args.get("encoder_normalize_before")),
        decoder_normalize_before=bool(args.get("decoder_normalize_before")),
        share_all_embeddings=bool(args.get("share_all_embeddings")),
        share_decoder_input_output_embed=bool(args.get("share_decoder_input_output_embed")),
        no_scale_embedding=bool(args.get("no_scale_embedding")),
        dropout=float(args.get("dropout", 0.1)), attention_dropout=float(args.get("attention_dropout", 0.0)),
        activation_dropout=float(args.get("activation_dropout", args.get("relu_dropout", 0.0)) or 0.0),
        activation_fn=args.get("activation_fn") or "relu",
        encoder_positional={"name": "learned" if learned["encoder"] else "fairseq_sinusoidal"},
        decoder_positional={"name": "learned" if learned["decoder"] else "fairseq_sinusoidal"},
        max_source_positions=int(args.get("max_source_positions", 1024)),
        max_target_positions=int(args.get("max_target_positions", 1024)),
        decoder_start="</s>",
    )


# our key (regex) -> how to get it from fairseq's state dict: one key, or keys concatenated on dim 0
_LAYER_MAP: list[tuple[str, list[str]]] = [
    (r"(encoder|decoder)\.layers\.(\d+)\.self_attn\.qkv_proj\.(weight|bias)",
     ["{0}.layers.{1}.self_attn.q_proj.{2}", "{0}.layers.{1}.self_attn.k_proj.{2}",
      "{0}.layers.{1}.self_attn.v_proj.{2}"]),
    (r"(encoder|decoder)\.layers\.(\d+)\.self_attn\.out_proj\.(weight|bias)",
     ["{0}.layers.{1}.self_attn.out_proj.{2}"]),
    (r"(encoder)\.layers\.(\d+)\.attn_res\.norm\.(weight|bias)", ["{0}.layers.{1}.self_attn_layer_norm.{2}"]),
    (r"(decoder)\.layers\.(\d+)\.self_res\.norm\.(weight|bias)", ["{0}.layers.{1}.self_attn_layer_norm.{2}"]),
    (r"(decoder)\.layers\.(\d+)\.cross_attn\.q_proj\.(weight|bias)", ["{0}.layers.{1}.encoder_attn.q_proj.{2}"]),
    (r"(decoder)\.layers\.(\d+)\.cross_attn\.kv_proj\.(weight|bias)",
     ["{0}.layers.{1}.encoder_attn.k_proj.{2}", "{0}.layers.{1}.encoder_attn.v_proj.{2}"]),
    (r"(decoder)\.layers\.(\d+)\.cross_attn\.out_proj\.(weight|bias)", ["{0}.layers.{1}.encoder_attn.out_proj.{2}"]),
    (r"(decoder)\.layers\.(\d+)\.cross_res\.norm\.(weight|bias)", ["{0}.layers.{1}.encoder_attn_layer_norm.{2}"]),
    (r"(encoder|decoder)\.layers\.(\d+)\.ffn\.(fc1|fc2)\.(weight|bias)", ["{0}.layers.{1}.{2}.{3}"]),
    (r"(encoder|decoder)\.layers\.(\d+)\.ffn_res\.norm\.(weight|bias)", ["{0}.layers.{1}.final_layer_norm.{2}"]),
    (r"(encoder|decoder)\.final_norm\.(weight|bias)", ["{0}.layer_norm.{1}"]),
    (r"(encoder|decoder)\.embedder\.embed_tokens\.weight", ["{0}.embed_tokens.weight"]),
]
_IGNORED = re.compile(r"(encoder|decoder)\.(version|embed_positions\._float_tensor)")  # no weights in them


def _legacy_in_proj(fs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """fairseq < 0.9 stored q, k, v fused as ``in_proj_weight``/``in_proj_bias`` (q, k, v order): split them."""
    out = dict(fs)
    for key in [k for k in fs if re.search(r"\.in_proj_(weight|bias)$", k)]:
        base, part = key.rsplit(".in_proj_", 1)
        for name, block in zip("qkv", out.pop(key).chunk(3, dim=0)):
            out[f"{base}.{name}_proj.{part}"] = block
    return out


def convert_state_dict(fs: dict[str, torch.Tensor], our_keys: list[str], path: Path,
                       tied: bool) -> dict[str, torch.Tensor]:
    """Our model's state dict (for ``our_keys``) from fairseq's; every fairseq weight must be used.
    ``tied``: the output projection is the decoder embedding."""
    fs = _legacy_in_proj(fs)
    used: set[str] = set()
    out: dict[str, torch.Tensor] = {}

    def take(*keys: str) -> torch.Tensor:
        missing = [k for k in keys if k not in fs]
        if missing:
            raise _refuse(path, f"weight {missing[0]} is missing")
        used.update(keys)
        return torch.cat([fs[k] for k in keys]) if len(keys) > 1 else fs[keys[0]]

    for key in our_keys:
        if key == "decoder.output_weight":  # 0.10+: output_projection; older: embed_out, or nothing when tied
            found = [k for k in ("decoder.output_projection.weight", "decoder.embed_out") if k in fs]
            out[key] = take(found[0] if found else "decoder.embed_tokens.weight" if tied else
                            "decoder.output_projection.weight")
            continue
        m = re.fullmatch(r"(encoder|decoder)\.embedder\.positional\.weight", key)
        if m:  # learned positions: fairseq's rows 0..pad belong to no position
            out[key] = take(f"{m.group(1)}.embed_positions.weight")[PAD_OFFSET:]
            continue
        for pattern, sources in _LAYER_MAP:
            m = re.fullmatch(pattern, key)
            if m:
                out[key] = take(*(s.format(*m.groups()) for s in sources))
                break
        else:
            raise _refuse(path, f"our weight {key} has no fairseq counterpart")
    left = sorted(k for k in fs if k not in used and not _IGNORED.fullmatch(k))
    if left:
        raise _refuse(path, f"weight {left[0]} ({len(left)} left over in all) has no place in nmt's Transformer")
    return out


def _languages(data: Path, args: dict[str, Any], source_lang: str | None,
               target_lang: str | None) -> tuple[str, str]:
    """--source-lang/--target-lang, else the data-bin's metadata.json, else the fairseq task's, else its one pair."""
    from nmt.data.data_dir import metadata_languages
    from nmt.interop.fairseq_data import find_pairs

    langs = metadata_languages(data, source_lang, target_lang)
    if langs is not None:
        return langs
    if args.get("source_lang") and args.get("target_lang"):
        return source_lang or args["source_lang"], target_lang or args["target_lang"]
    pairs = list(find_pairs(data))
    if len(pairs) == 1:
        return source_lang or pairs[0][0], target_lang or pairs[0][1]
    raise UsageError(f"--data {data}: cannot tell the languages; pass --source-lang and --target-lang")


def build_imported_model(state: dict[str, Any], path: str | Path, src_dict: Dictionary,
                         tgt_dict: Dictionary) -> torch.nn.Module:
    """The nmt model holding the weights of fairseq checkpoint ``state`` (read from ``path``); its args
    are checked against its tensors before the model is allocated."""
    from nmt.checkpoint.model_fit import build_model_from_weights
    from nmt.plugin_loader import load_plugins

    path = Path(path)
    cfg = model_config_from_fairseq(fairseq_model_args(state, path), path)
    for side, d in (("encoder", src_dict), ("decoder", tgt_dict)):
        rows = state["model"].get(f"{side}.embed_tokens.weight")
        if rows is not None and rows.size(0) != len(d):
            raise DataError(f"fairseq checkpoint {path}: its {side} embedding has {rows.size(0)} rows but the "
                            f"dictionary has {len(d)} symbols; give the --data it was trained on")
    load_plugins()
    tied = cfg.share_all_embeddings or cfg.share_decoder_input_output_embed
    model = build_model_from_weights(
        cfg, state["model"], src_dict, tgt_dict, source=f"fairseq checkpoint {path}", what="model config (args)",
        fix="the file is damaged or its args were edited; give the checkpoint as fairseq-train wrote it",
        convert=lambda weights, keys: convert_state_dict(dict(weights), keys, path, tied))
    return model.eval()


def import_checkpoint(path: str | Path, data: str | Path, output: str | Path, *, source_lang: str | None = None,
                      target_lang: str | None = None) -> Path:
    """Convert fairseq checkpoint ``path`` (dictionaries from data-bin ``data``, ours or fairseq's) into an
    nmt checkpoint at ``output``, written atomically; returns ``output``."""
    from nmt.checkpoint.format import build_state, save_checkpoint
    from nmt.interop.fairseq_data import read_fairseq_dictionary

    path, data = Path(path), Path(data)
    if not data.is_dir():
        raise UsageError(f"--data {data}: no such folder; give the data-bin the fairseq model was trained on")
    fs_state = load_fairseq_file(path)
    task = (fs_state.get("cfg") or {}).get("task") or fairseq_model_args(fs_state, path)
    src, tgt = _languages(data, dict(task), source_lang, target_lang)
    dicts = {lang: read_fairseq_dictionary(data / f"dict.{lang}.txt") for lang in (src, tgt)}
    tgt_dict = dicts[src] if dicts[src] == dicts[tgt] else dicts[tgt]  # one object when joined
    model = build_imported_model(fs_state, path, dicts[src], tgt_dict)
    history = fs_state.get("optimizer_history") or [{}]
    num_updates = int(history[-1].get("num_updates", 0) or 0)
    origin = {"toolkit": "fairseq", "path": str(path.resolve()), "num_updates": num_updates}
    model_cfg = cast(ModelConfig, model.cfg)  # every model keeps its config; nn.Module's typing can't say so
    state = build_state(model=model, config={"model": dataclasses.asdict(model_cfg), "source_lang": src,
                                             "target_lang": tgt},
                        epoch=0, num_updates=num_updates, dictionaries={"source": dicts[src], "target": tgt_dict},
                        extra={"imported_from": origin})
    save_checkpoint(output, state)
    return Path(output)
