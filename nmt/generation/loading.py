"""Loading the models to translate with: ``--path`` (checkpoints or model folders, an ensemble when several),
a model folder standing in for DATA, the models made ready to decode (--bf16, --quantize, --compile)."""

from __future__ import annotations

from typing import Any

import torch

from nmt.config.generate import GenerationConfig, InferenceConfig
from nmt.cpu_speed import for_inference, process_settings
from nmt.data.data_bin import DataDir
from nmt.data.dictionary import Dictionary
from nmt.errors import ConfigError, UsageError
from nmt.generation.ensemble import EnsembleModel
from nmt.generation.inference import Translator, search_for


def checkpoint_paths(spec: str | None) -> list[str]:
    """``--path a.pt:b.pt`` -> ["a.pt", "b.pt"] (each a checkpoint or a model folder)."""
    paths = [p for p in (spec or "").split(":") if p]
    if not paths:
        raise UsageError("--path is required: the checkpoint or model folder to translate with (several joined "
                         "by ':' form an ensemble), e.g. --path checkpoints/checkpoint_best.pt")
    return paths


def model_and_data(data: str | None, path: str | None) -> tuple[str | None, str | None]:
    """(DATA, --path) with a model folder standing in for what is missing: ``CMD MODEL_DIR`` translates
    with the folder's model, ``CMD --path MODEL_DIR`` reads the folder's dictionaries and text pipeline
    (``--path DIR1:DIR2``, an ensemble of folders, reads the first one's)."""
    from nmt.model_folder.layout import is_model_folder

    if not path and is_model_folder(data):
        return data, data
    folders = [p for p in (path or "").split(":") if p]
    if not data and folders and all(is_model_folder(p) for p in folders):
        return folders[0], path
    return data, path


def refuse_model_folder_as_data(data: str, splits: str) -> None:
    """A model folder holds no splits: generating or scoring needs the data-bin beside it."""
    from nmt.model_folder.layout import is_model_folder

    if is_model_folder(data):
        raise UsageError(f"DATA {data} is a model folder, which holds no splits ({splits}); give the data-bin "
                         f"that holds them and the folder as --path: DATA_BIN --path {data}")


def load_model(path: str, src_dict: Dictionary, tgt_dict: Dictionary, state: dict[str, Any] | None = None
               ) -> torch.nn.Module:
    """Build the model a checkpoint describes and load its weights; its dictionaries must match, its
    stored config must fit its tensors before anything is allocated (an edited config is refused) and its
    parameters must be finite. ``state``: the checkpoint at ``path`` when the caller has read it already."""
    from nmt.checkpoint.format import load_model_for_inference, model_parts
    from nmt.checkpoint.model_fit import build_model_from_weights
    from nmt.checkpoint.verify import check_dictionaries
    from nmt.model_folder.layout import is_model_folder, load_model_folder

    folder = is_model_folder(path)
    if folder:
        model_cfg, weights, fingerprints = load_model_folder(path)
    else:
        model_cfg, weights, fingerprints = model_parts(state) if state is not None else load_model_for_inference(path)
    check_dictionaries({"dictionaries": fingerprints}, path, {"source": src_dict, "target": tgt_dict})
    source = f"model folder {path}" if folder else f"checkpoint {path}"
    fix = ("export the model again with nmt-export" if folder
           else "the file is damaged or its config was edited; use the checkpoint as nmt-train wrote it")
    model = build_model_from_weights(model_cfg, weights, src_dict, tgt_dict, source=source, what="model config",
                                     fix=fix)
    return model.eval()


def load_ensemble(spec: str | None, src_dict: Dictionary, tgt_dict: Dictionary) -> EnsembleModel:
    return EnsembleModel([load_model(p, src_dict, tgt_dict) for p in checkpoint_paths(spec)])


def load_inference_models(inf: InferenceConfig, data: DataDir) -> EnsembleModel:
    """The models of ``--path`` as an ensemble ready to decode (threads set, --bf16 or --quantize applied,
    --compile'd), with nmt's CPU speed settings (``nmt.cpu_speed``)."""
    if inf.engine not in ("auto", "torch"):  # the other engines are loaded by nmt.engines.selection.load_engine
        raise UsageError(f"--engine {inf.engine}: these are the torch engine's models; load the engine with "
                         "nmt.engines.selection.load_engine")
    process_settings(compiled=inf.compile)
    if inf.threads:
        torch.set_num_threads(inf.threads)
    if inf.bf16 and inf.quantize != "none":
        raise ConfigError(f"--bf16 and --quantize {inf.quantize}: choose one ({inf.quantize} weights replace the fp32 "
                          "ones)")
    if inf.compile and inf.quantize != "none":
        raise ConfigError(f"--compile and --quantize {inf.quantize}: choose one (torch.compile does not take the "
                          "dynamic-quantized layers); --compile --bf16 is the faster pair on the CPU")
    ens = load_ensemble(inf.path, data.src_dict, data.tgt_dict)
    if inf.quantize != "none":
        from nmt.generation.quantize import quantize_models

        return quantize_models(ens, inf.quantize)
    for model in ens.models:  # --quantize (above) takes the plain models; --compile's inductor packs its own weights
        for_inference(model, inf.bf16, pack=not inf.compile)
    if inf.compile:
        ens.compile_decoders()
    return ens


def make_translator(gen: GenerationConfig, inf: InferenceConfig, data: DataDir, seed: int) -> Translator:
    ens = load_inference_models(inf, data)
    return Translator(ens, search_for(gen, ens, data, seed))
