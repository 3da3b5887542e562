"""An nmt Transformer as a CTranslate2 model folder (``nmt-export --format ctranslate2``), written
against ``ctranslate2.specs`` so that nothing goes through fairseq or a converter of another toolkit.

What maps exactly: scaled dot-product attention at every site (queries, keys and values of one size
per head: --attention-key-dim other than d_model / heads is refused), or Shaw et al.'s relative-position
self-attention (``relative``) on a side without absolute positions (``--positional none`` there), which
is CTranslate2's ``relative_position`` (the same distance j - i clipped to [-k, k], tables shared by the
heads, the position term scaled with the content term), post- or pre-norm (each side on its
own, with the final LayerNorm of a pre-norm stack), relu or gelu, separate or shared embeddings and
the tied output projection, the embedding scale (sqrt(d) or 1). Positions are exported as the model's
own table (``positional(n)`` for n = --max-source/target-positions, whichever plugin computes it), so
CTranslate2's sinusoid convention never matters. Anything else is refused by name before a file is
written. The folder is built beside ``output`` and renamed into place when complete.

CTranslate2 is given the dictionaries' symbols in id order, starts decoding from the model's
``decoder_start`` symbol and stops at ``</s>``. Like nmt's encoder, it expects each source sentence to
end with ``</s>``: pass the BPE'd tokens plus ``"</s>"`` to ``translate_batch``, with
``suppress_sequences=suppressed_symbols(...)`` for nmt's search rules (docs/ctranslate2.md).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from nmt.config.model import ModelConfig
from nmt.data.data_dir import remove_empty
from nmt.data.dictionary import Dictionary
from nmt.data.work_dirs import clean_leftovers, new_work_dir, release
from nmt.errors import ConfigError, UsageError
from nmt.fileio import DiskFullError
from nmt.models.attention import AttentionBase
from nmt.models.layers import DecoderLayer, EncoderLayer, FeedForward, Residual
from nmt.models.transformer import Embedder, TransformerDecoder, TransformerEncoder, TransformerModel
from nmt.owned_files import move_files_into
from nmt.signals import stop_signals_deferred

WHO = "nmt-export --format ctranslate2"
FALLBACK = "export with --format nmt instead"
ATTENTION = ("scaled_dot_product",)  # the only attention CTranslate2 computes the same way at every site
RELATIVE = "relative"  # self-attention CTranslate2 computes the same way, on a side without absolute positions
POSITIONAL = ("sinusoidal", "fairseq_sinusoidal", "learned")  # absolute tables added to the embeddings
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU"}  # CTranslate2's GELU is the erf form, as F.gelu
ROLES = {"encoder_attention": "encoder self-attention", "decoder_attention": "decoder self-attention",
         "cross_attention": "encoder-decoder attention", "encoder_positional": "encoder positional encoding",
         "decoder_positional": "decoder positional encoding"}


def unsupported(model: nn.Module) -> str | None:
    """What of ``model`` CTranslate2 cannot run, worded for an error message (None: nothing)."""
    if not isinstance(model, TransformerModel):
        return f"the model is a {type(model).__name__}, not nmt's TransformerModel, which CTranslate2 cannot run"
    names = model.plugin_names()
    for role, name in names.items():
        allowed, beside = _allowed(role, names)
        if name not in allowed:
            return (f"the model's {ROLES.get(role, role)} is '{name}', which CTranslate2 cannot run{beside} (it "
                    f"runs {' or '.join(allowed)})")
    for attn in model.modules():
        if isinstance(attn, AttentionBase) and attn.key_dim != attn.head_dim:
            return (f"the model's attention key size d_k is {attn.key_dim} (--attention-key-dim), not d_model / "
                    f"heads ({attn.head_dim}), which CTranslate2 cannot run")
    activation = model.cfg.activation_fn
    if activation not in ACTIVATIONS:
        return f"the model's activation is '{activation}', which CTranslate2 cannot run (it runs relu or gelu)"
    return None


def _allowed(role: str, names: dict[str, str]) -> tuple[tuple[str, ...], str]:
    """The plugins CTranslate2 runs at ``role`` (a key of ``plugin_names()``) given the model's others, and
    the condition that narrowed them, worded for the error."""
    if role == "cross_attention":
        return ATTENTION, ""
    if role.endswith("_attention"):
        return (*ATTENTION, RELATIVE), ""
    if names.get(role.replace("_positional", "_attention")) == RELATIVE:
        return ("none",), " beside relative-position self-attention"
    return POSITIONAL, ""


def _relative_sides(model: TransformerModel) -> set[str]:
    """The sides ("encoder", "decoder") whose self-attention is relative-position attention."""
    names = model.plugin_names()
    return {side for side in ("encoder", "decoder") if names[f"{side}_attention"] == RELATIVE}


def check_exportable(model: nn.Module, src_dict: Dictionary, tgt_dict: Dictionary) -> None:
    """Refuse, in one line, a model CTranslate2 cannot run or dictionaries that are not the model's."""
    problem = unsupported(model)
    if problem is not None:
        raise ConfigError(f"{WHO}: {problem}; {FALLBACK}")
    assert isinstance(model, TransformerModel)
    for side, coder, dictionary in (("source", model.encoder, src_dict), ("target", model.decoder, tgt_dict)):
        rows = coder.embed_tokens.num_embeddings
        if len(dictionary) != rows:
            raise UsageError(f"{WHO}: the {side} dictionary has {len(dictionary)} symbols but the model's "
                             f"{side} embedding {rows}; give the data-bin the model was trained on")


def check_output(output: Path) -> None:
    """Refuse an output that is a file or a folder with something in it (nothing is ever replaced)."""
    if output.is_symlink() or (output.exists() and not output.is_dir()):
        raise UsageError(f"{WHO}: {output} exists and is not a folder; give a new or empty folder")
    if output.is_dir() and any(output.iterdir()):
        raise UsageError(f"{WHO}: {output} is not empty; give a new or empty folder (nothing is overwritten)")


def check_quantization(quantization: str | None) -> None:
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    if quantization is not None and quantization not in ACCEPTED_MODEL_TYPES:
        raise ConfigError(f"{WHO}: quantization '{quantization}' is not one of CTranslate2's "
                          f"({', '.join(ACCEPTED_MODEL_TYPES)}); choose one of them or none")


def _array(t: torch.Tensor) -> Any:
    """A float32 numpy copy (a bf16 model is exported in float32; ``quantization`` picks the stored type)."""
    return t.detach().to(device="cpu", dtype=torch.float32).numpy().copy()


def _set_linear(spec: Any, linear: nn.Linear) -> None:
    spec.weight = _array(linear.weight)
    if linear.bias is not None:
        spec.bias = _array(linear.bias)


def _set_norm(spec: Any, norm: nn.LayerNorm) -> None:
    spec.gamma = _array(norm.weight)
    spec.beta = _array(norm.bias)


def _set_attention(spec: Any, attn: AttentionBase, residual: Residual, relative: bool = False) -> None:
    """One attention sub-layer: our Q|K|V (self) or K|V (cross) projections are fused in CTranslate2's order;
    ``relative``: also the a^K and a^V tables, one row per clipped distance -k..k (CTranslate2 reads k from
    their size)."""
    projections = [attn.qkv_proj] if attn.self_attention else [attn.q_proj, attn.kv_proj]
    for linear_spec, linear in zip(spec.linear, [*projections, attn.out_proj]):
        _set_linear(linear_spec, linear)
    _set_norm(spec.layer_norm, residual.norm)
    if relative:
        spec.relative_position_keys = _array(cast(torch.Tensor, attn.relative_keys))  # (2k+1, d_k)
        spec.relative_position_values = _array(cast(torch.Tensor, attn.relative_values))  # (2k+1, d_v)


def _set_ffn(spec: Any, ffn: FeedForward, residual: Residual) -> None:
    _set_linear(spec.linear_0, ffn.fc1)
    _set_linear(spec.linear_1, ffn.fc2)
    _set_norm(spec.layer_norm, residual.norm)


def _set_inputs(spec: Any, embeddings: Any, embedder: Embedder, max_positions: int, relative: bool) -> None:
    """Token embeddings, their scale, and positions 0 .. max_positions-1 exactly as the model adds them (none
    beside relative-position attention)."""
    embeddings.weight = _array(embedder.embed_tokens.weight)
    spec.scale_embeddings = float(embedder.scale)
    if not relative:
        with torch.no_grad():
            spec.position_encodings.encodings = _array(embedder.positional(max_positions, 0))  # (max, C)


def _set_final_norm(spec: Any, norm: nn.LayerNorm | None) -> None:
    if norm is not None:
        _set_norm(spec.layer_norm, norm)


def _layer_norm_epsilon(model: TransformerModel) -> float:
    eps = {m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)}
    if len(eps) != 1:
        raise ConfigError(f"{WHO}: the model's LayerNorms use different epsilons ({sorted(eps)}), which "
                          f"CTranslate2 cannot run; {FALLBACK}")
    return float(eps.pop())


def _activation(name: str) -> Any:
    from ctranslate2.specs import common_spec

    return getattr(common_spec.Activation, ACTIVATIONS[name])


def _encoder_spec(encoder: TransformerEncoder, cfg: ModelConfig, relative: bool) -> Any:
    from ctranslate2.specs import transformer_spec

    layers = cast(list[EncoderLayer], list(encoder.layers))
    spec = transformer_spec.TransformerEncoderSpec(len(layers), layers[0].self_attn.num_heads,
                                                   pre_norm=encoder.final_norm is not None,
                                                   activation=_activation(cfg.activation_fn),
                                                   relative_position=relative)
    _set_inputs(spec, spec.embeddings[0], encoder.embedder, int(cfg.max_source_positions), relative)
    for layer_spec, layer in zip(spec.layer, layers):
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.attn_res, relative)
        _set_ffn(layer_spec.ffn, layer.ffn, layer.ffn_res)
    _set_final_norm(spec, encoder.final_norm)
    return spec


def _decoder_spec(decoder: TransformerDecoder, cfg: ModelConfig, relative: bool) -> Any:
    from ctranslate2.specs import transformer_spec

    layers = cast(list[DecoderLayer], list(decoder.layers))
    spec = transformer_spec.TransformerDecoderSpec(len(layers), layers[0].self_attn.num_heads,
                                                   pre_norm=decoder.final_norm is not None,
                                                   activation=_activation(cfg.activation_fn),
                                                   relative_position=relative)
    _set_inputs(spec, spec.embeddings, decoder.embedder, int(cfg.max_target_positions), relative)
    spec.projection.weight = _array(decoder.output_weight)  # no bias; a tied matrix is stored once (aliased)
    for layer_spec, layer in zip(spec.layer, layers):
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_res, relative)
        _set_attention(layer_spec.attention, layer.cross_attn, layer.cross_res)
        _set_ffn(layer_spec.ffn, layer.ffn, layer.ffn_res)
    _set_final_norm(spec, decoder.final_norm)
    return spec


def build_spec(model: TransformerModel, src_dict: Dictionary, tgt_dict: Dictionary) -> Any:
    """The ``ctranslate2.specs.TransformerSpec`` of ``model``, its vocabularies and special symbols set."""
    from ctranslate2.specs import transformer_spec

    relative = _relative_sides(model)
    spec = transformer_spec.TransformerSpec(_encoder_spec(model.encoder, model.cfg, "encoder" in relative),
                                            _decoder_spec(model.decoder, model.cfg, "decoder" in relative))
    spec.register_source_vocabulary(list(src_dict.symbols))
    spec.register_target_vocabulary(list(tgt_dict.symbols))
    config = spec.config
    config.unk_token, config.bos_token, config.eos_token = "<unk>", "<s>", "</s>"
    config.decoder_start_token = model.cfg.decoder_start
    config.add_source_bos = False
    config.add_source_eos = False  # the caller appends "</s>", as nmt's data pipeline does
    config.layer_norm_epsilon = _layer_norm_epsilon(model)
    return spec


def suppressed_symbols(decoder_start: str) -> list[list[str]]:
    """``translate_batch(suppress_sequences=...)`` for nmt's search rules: <pad> is never produced, nor
    <s> when decoding starts from it (a fairseq-imported model starts from </s>, and may produce <s>)."""
    return [["<pad>"], ["<s>"]] if decoder_start == "<s>" else [["<pad>"]]


def _save(spec: Any, output: Path) -> None:
    """``spec.save`` into a private folder beside ``output``, renamed to ``output`` once complete (or its
    files moved into an empty ``output``, model.bin last); on any failure the private folder and the
    parent folders this made are removed."""
    created = [p for p in output.parents if not p.exists()]  # deepest first
    tmp = None
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        clean_leftovers(output)
        tmp = new_work_dir(output, "tmp")
        spec.save(str(tmp))
        release(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the result is an ordinary folder
        with stop_signals_deferred():
            if output.is_dir():  # the user's empty folder stays theirs: filled, not replaced
                check_output(output)  # something may have appeared since
                move_files_into(tmp, output, "model.bin")
            else:
                os.replace(tmp, output)
    except BaseException as e:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        remove_empty(created)
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(output, e) from None
        if isinstance(e, OSError):
            raise UsageError(f"{WHO}: cannot write {output} ({e.strerror or e}); give a new or empty folder "
                             "you may write to") from None
        raise


def export_ctranslate2(model: torch.nn.Module, src_dict: Dictionary, tgt_dict: Dictionary, output: str | Path,
                       *, quantization: str | None = None) -> Path:
    """Write a CTranslate2 model folder for ``model`` (an nmt TransformerModel in eval mode, as built by
    nmt.generation.loading.load_model) and its dictionaries at ``output``, a new or empty folder.
    ``quantization`` is CTranslate2's weight type ("int8", "float16", ...; None keeps float32).
    Everything is checked before anything is written; returns the folder."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise UsageError(f"{WHO} needs the ctranslate2 package: pip install 'nmt[ctranslate2]'") from None
    output = Path(output)
    check_exportable(model, src_dict, tgt_dict)
    check_quantization(quantization)
    check_output(output)
    assert isinstance(model, TransformerModel)
    spec = build_spec(model, src_dict, tgt_dict)
    spec.validate()
    spec.optimize(quantization=quantization)
    _save(spec, output)
    return output
