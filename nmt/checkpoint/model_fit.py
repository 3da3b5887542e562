"""A model built from a stored config only once the config is known to fit the stored tensors.

A checkpoint's config is just data: an edited or damaged one (``encoder_embed_dim: 65536``, a billion
layers, a billion positions) would make the builder allocate gigabytes before ``load_state_dict``
could notice. So the layer counts are read from the tensor names first (a billion layers is refused
before a single module is made), the model is then built on the ``meta`` device (shapes, no memory)
and compared with the tensors, the buffers it computes at build time (which no checkpoint stores,
e.g. sinusoid tables) are bounded, and only then is it built for real.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping

import torch

from nmt.checkpoint.errors import CheckpointError
from nmt.checkpoint.verify import check_finite_weights, parameter_mismatch
from nmt.config.model import ModelConfig
from nmt.data.dictionary import Dictionary
from nmt.errors import ConfigError, NmtError
from nmt.fields import to_dataclass
from nmt.models.build import build_model

UNSTORED_BUFFER_FLOOR = 1 << 28  # bytes of computed buffers always allowed (a 1024 x 512 sinusoid table is 2 MiB)
_LAYER = re.compile(r"(encoder|decoder)\.layers\.(\d+)\.")

Weights = Mapping[str, torch.Tensor]
Convert = Callable[[Weights, list], Weights]
StoredModelConfig = ModelConfig | Mapping[str, Any]  # a checkpoint's config is a plain dict until checked


def check_layer_counts(model_cfg: StoredModelConfig, names: Iterable[str], source: str, what: str, fix: str) -> None:
    """Refuse a config whose ``encoder_layers`` / ``decoder_layers`` differ from the layers the tensor
    names hold (``encoder.layers.<i>.``), before any layer is built. The counts are read through the
    ModelConfig dataclass, so that its defaults and layout apply as they do when the model is built."""
    cfg: ModelConfig = to_dataclass(ModelConfig, model_cfg)
    wanted = {"encoder": cfg.encoder_layers, "decoder": cfg.decoder_layers}
    found: dict[str, set[int]] = {"encoder": set(), "decoder": set()}
    for name in names:
        m = _LAYER.match(name)
        if m:
            found[m.group(1)].add(int(m.group(2)))
    for side, layers in found.items():
        want = wanted[side]
        if want != len(layers):
            raise CheckpointError(f"{source}: its stored {what} asks for {want!r} {side} layers ({side}_layers) "
                                  f"but its tensors hold {len(layers)}; {fix}")


def _probe(model_cfg: ModelConfig, src_dict: Dictionary, tgt_dict: Dictionary, source: str, what: str,
           fix: str) -> torch.nn.Module:
    """The model ``model_cfg`` describes, on the meta device: every shape, no memory."""
    try:
        with torch.device("meta"):
            return build_model(model_cfg, src_dict, tgt_dict)
    except NmtError:
        raise
    except (RuntimeError, ValueError, TypeError, OverflowError, AttributeError, KeyError) as e:
        first = (str(e).splitlines() or [""])[0][:160]
        raise CheckpointError(f"{source}: its stored {what} describes no model that can be built "
                              f"({type(e).__name__}: {first}); {fix}") from None


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _check_buffers(probe: torch.nn.Module, weights: Weights, source: str, what: str, fix: str) -> None:
    """Refuse a model whose computed (unstored) buffers are absurd next to the stored tensors."""
    unstored = [(name, b) for name, b in probe.named_buffers() if name not in weights]
    total = sum(_nbytes(b) for _, b in unstored)
    stored = sum(_nbytes(t) for t in weights.values() if isinstance(t, torch.Tensor))
    if total <= max(UNSTORED_BUFFER_FLOOR, stored):
        return
    name, biggest = max(unstored, key=lambda nb: _nbytes(nb[1]))
    owner = probe.get_submodule(name.rpartition(".")[0]) if "." in name else probe
    option = getattr(owner, "option", None)
    why = f" (set by {option} = {getattr(owner, 'max_positions', '?')})" if option else ""
    raise CheckpointError(f"{source}: its stored {what} asks for {total / 2**30:.1f} GiB of buffers "
                          f"the checkpoint does not store ({name} is {tuple(biggest.shape)}{why}) next to "
                          f"{stored / 2**20:.1f} MiB of weights; {fix}")


def build_model_from_weights(model_cfg: StoredModelConfig, weights: Weights, src_dict: Dictionary,
                             tgt_dict: Dictionary, *, source: str, what: str, fix: str,
                             convert: Convert | None = None) -> torch.nn.Module:
    """The model ``model_cfg`` describes, holding ``weights``, built only after the config is checked
    against them. ``source`` names the file ("checkpoint X"), ``what`` the config in it ("model
    config"), and ``fix`` says what to do when it does not fit. ``convert(weights, model_keys)``, when given, maps the
    stored tensors to the model's names (imported checkpoints)."""
    try:  # a stored value outside its declared range is the file's fault, not a flag's
        cfg: ModelConfig = to_dataclass(ModelConfig, model_cfg)
    except ConfigError as e:
        raise CheckpointError(f"{source}: its stored {what} is not valid ({e}); {fix}") from None
    check_layer_counts(cfg, weights, source, what, fix)
    probe = _probe(cfg, src_dict, tgt_dict, source, what, fix)
    if convert is not None:
        weights = convert(weights, list(probe.state_dict()))
    mismatch = parameter_mismatch(probe.state_dict(), weights)
    if mismatch:
        raise CheckpointError(f"{source}: the model its stored {what} describes does not match its tensors: "
                              f"{mismatch}; {fix}")
    _check_buffers(probe, weights, source, what, fix)
    check_finite_weights(weights, source)
    model = build_model(cfg, src_dict, tgt_dict)
    model.load_state_dict(weights)
    return model
