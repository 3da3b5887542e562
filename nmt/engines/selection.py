"""``--engine torch|onnxruntime|compiled|ctranslate2|auto``: which engine runs ``--path``, and loading it.

torch runs everything: checkpoints, ensembles, model folders, --bf16 / --quantize / --compile. The other engines
run a model folder's engine files (``nmt-export --with``), checked against model.json before they are read; a
folder without them is one line naming the export that adds them. ``auto``, the default, is torch for
checkpoints, ensembles and folders without engine files, and otherwise the first engine of ``AUTO_ORDER`` the
folder holds that honours the options given (--compile and --quantize are the torch engine's; --bf16 also runs
compiled bf16 packages and CTranslate2, --quantize int8 the ONNX int8 graphs and CTranslate2) and loads on this
machine (a compiled package of another machine, an engine whose package is not installed, or search options
CTranslate2 cannot honour pass to the next), said on stderr in one line.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional, cast

import torch

from nmt.config.generate import GenerationConfig, InferenceConfig
from nmt.data.data_bin import DataDir
from nmt.engines import AUTO, AUTO_ORDER, EXPORT_OF
from nmt.engines.translator import BatchTranslator, StepTranslator, TorchReference, TranslatorLike
from nmt.errors import NmtError, UsageError
from nmt.generation.alignment import AttentionModel
from nmt.generation.ensemble import EnsembleModel
from nmt.generation.inference import Translator, first_decoder_input, search_for


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class LoadedEngine:
    """A model ready to search with one engine: ``ens`` (torch, or the onnxruntime / compiled steps) or ``ct2``
    (CTranslate2's translator), and the torch model of the same folder, loaded on first need (attention weights;
    CTranslate2's outputs' per-token log-probabilities)."""

    name: str
    data: DataDir
    path: str
    ens: Optional[EnsembleModel] = None
    ct2: Any = None  # nmt.engines.ctranslate2_runtime.CTranslate2Model
    reference: Optional[TorchReference] = None  # the torch model of the folder, for what the engine does not give
    parameters: int = 0
    # CTranslate2: each output's per-token log-probabilities, from a teacher-forced pass of ``reference`` (about as
    # costly as the search); off, a hypothesis has CTranslate2's own score and no per-token ones
    scores: bool = True

    def translator(self, gen: GenerationConfig, seed: int) -> TranslatorLike:
        """The search ``gen`` configures, run by this engine (its options checked for this model)."""
        if self.ct2 is not None:
            from nmt.engines.ctranslate2_runtime import CTranslate2Search
            from nmt.generation.guards import within_positions
            from nmt.generation.search_options import check_fits_model

            tgt = self.data.tgt_dict
            check_fits_model(gen, self.ct2.max_target_positions, tgt, str(self.data.path / f"dict.{self.data.tgt}.txt"))
            assert self.reference is not None
            search = CTranslate2Search(self.ct2, within_positions(gen, self.ct2.max_target_positions),
                                       log_probs=self.reference.log_probs if self.scores else None)
            return BatchTranslator(search.search, self.ct2.max_source_positions, self.reference)
        assert self.ens is not None
        if self.name == "torch":
            return Translator(self.ens, search_for(gen, self.ens, self.data, seed))
        return StepTranslator(self.ens, search_for(gen, self.ens, self.data, seed), reference=self.reference)

    def max_source_positions(self) -> int:
        if self.ct2 is not None:
            return int(self.ct2.max_source_positions)
        assert self.ens is not None
        return self.ens.max_source_positions()

    def max_target_positions(self) -> int:
        """The longest output (tokens, </s> included) the engine's model was built for."""
        if self.ct2 is not None:
            return int(self.ct2.max_target_positions)
        assert self.ens is not None
        return self.ens.max_target_positions()

    def attention_model(self) -> tuple[AttentionModel, int]:
        """The torch model whose attention weights show a translation (the first of an ensemble), and the decoder's
        first input symbol (a teacher-forced pass starts from it)."""
        if self.name == "torch":
            assert self.ens is not None
            return self.ens.models[0], first_decoder_input(self.ens, self.data.tgt_dict)
        assert self.reference is not None
        return self.reference.model(), self.reference.first


def _paths(inf: InferenceConfig) -> tuple[list[str], Optional[str]]:
    """(--path's parts, the model folder when --path is one)."""
    from nmt.generation.loading import checkpoint_paths
    from nmt.model_folder.layout import is_model_folder

    paths = checkpoint_paths(inf.path)
    return paths, (paths[0] if len(paths) == 1 and is_model_folder(paths[0]) else None)


def _torch_only(inf: InferenceConfig, engine: str) -> Optional[str]:
    """The first option given that ``engine`` cannot honour (None: none)."""
    given = [flag for flag, on in (("--compile", inf.compile), ("--bf16", inf.bf16),
                                   (f"--quantize {inf.quantize}", inf.quantize != "none")) if on]
    if engine == "ctranslate2":  # CTranslate2 computes in bfloat16 or int8 itself (compute_type)
        given = [flag for flag in given if flag == "--compile"]
    if engine == "compiled":  # its bf16 packages (nmt-export --compiled-precision)
        given = [flag for flag in given if flag != "--bf16"]
    if engine == "onnxruntime":  # its int8 graphs (nmt-export --onnx-precision)
        given = [flag for flag in given if flag != "--quantize int8"]
    return given[0] if engine != "torch" and given else None


def held_engines(folder: str) -> dict[str, dict[str, Any]]:
    """The engine exports the model folder ``folder`` lists: engine name -> its model.json record."""
    from nmt.engines import EXPORTS
    from nmt.model_folder.engine_files import records
    from nmt.model_folder.layout import read_manifest

    return {EXPORTS[name]: record for name, record in records(read_manifest(folder), folder).items() if name in EXPORTS}


def missing_engine(engine: str, folder: str) -> UsageError:
    name = EXPORT_OF[engine]
    return UsageError(f"--engine {engine}: model folder {folder} holds no {name}/ (its engine files); add them with "
                      f"nmt-export --path {folder} --with {name}")


def load_engine(inf: InferenceConfig, data: DataDir, gen: Optional[GenerationConfig] = None, *, scores: bool = True,
                announce: Callable[[str], None] = _stderr) -> LoadedEngine:
    """The engine ``inf.engine`` names for ``inf.path``, loaded; ``auto`` tells ``announce`` what it took when the
    folder offered a choice. ``gen``: the default search (auto passes over CTranslate2 when it cannot run it);
    ``scores``: whether the caller shows per-token log-probabilities (``LoadedEngine.scores``)."""
    paths, folder = _paths(inf)
    engine = inf.engine
    if engine not in (AUTO, "torch"):
        if folder is None:
            if len(paths) > 1:
                raise UsageError(f"--engine {engine}: --path {inf.path} is an ensemble, which only the torch engine "
                                 "runs; drop --engine (or give one model folder)")
            raise UsageError(f"--engine {engine}: --path {paths[0]} is a checkpoint, which only the torch engine "
                             f"runs; export a model folder with its engine files: nmt-export DATA --path {paths[0]} "
                             f"--output DIR --with {EXPORT_OF[engine]}")
        flag = _torch_only(inf, engine)
        if flag:
            raise UsageError(f"{flag}: an option of the torch engine, which --engine {engine} cannot honour; drop "
                             f"{flag.split()[0]} or use --engine torch")
        held = held_engines(folder)
        if engine not in held:
            raise missing_engine(engine, folder)
        return _load(engine, folder, held[engine], inf, data, scores)
    held = held_engines(folder) if folder is not None and engine == AUTO else {}
    if not held:
        return _load_torch(inf, data)
    assert folder is not None
    passed = []
    for candidate in AUTO_ORDER:
        if candidate == "torch":
            break
        if candidate not in held:
            continue
        flag = _torch_only(inf, candidate)
        if flag:
            passed.append(f"{candidate} cannot honour {flag.split()[0]}")
            continue
        try:
            if candidate == "ctranslate2" and gen is not None:
                from nmt.engines.ctranslate2_runtime import check_options

                check_options(gen)
            loaded = _load(candidate, folder, held[candidate], inf, data, scores)
        except NmtError as e:
            passed.append(f"{candidate} not loaded: {e}")
            continue
        announce(f"engine: {candidate} (auto)" + (f"; {'; '.join(passed)}" if passed else ""))
        return loaded
    announce("engine: torch (auto)" + (f"; {'; '.join(passed)}" if passed else ""))
    return _load_torch(inf, data)


def _load_torch(inf: InferenceConfig, data: DataDir) -> LoadedEngine:
    from nmt.generation.loading import load_inference_models

    ens = load_inference_models(inf, data)
    return LoadedEngine("torch", data, str(inf.path), ens=ens,
                        parameters=sum(p.numel() for m in ens.models for p in m.parameters()))


def _load(engine: str, folder: str, record: dict[str, Any], inf: InferenceConfig, data: DataDir,
          scores: bool) -> LoadedEngine:
    """The engine files of ``record`` in ``folder``, checked against model.json, loaded by ``engine``."""
    from nmt.generation.loading import load_model
    from nmt.model_folder.engine_files import verify
    from nmt.model_folder.layout import read_manifest

    manifest = read_manifest(folder)
    files = verify(folder, record)
    loaded = LoadedEngine(engine, data, folder, parameters=int(manifest.get("parameters") or 0),
                          reference=TorchReference(lambda: load_model(folder, data.src_dict, data.tgt_dict),
                                                   data.src_dict, data.tgt_dict))
    if inf.threads:  # the torch engine's rule; also the threads of the reference model's passes
        torch.set_num_threads(inf.threads)
    if engine == "ctranslate2":
        from nmt.engines.ctranslate2_runtime import compute_type, load_ctranslate2
        from nmt.hardware import usable_cores

        compute = compute_type(inf.bf16, inf.quantize)
        loaded.ct2 = load_ctranslate2(files, data.src_dict, data.tgt_dict, manifest["model_config"],
                                      threads=inf.threads or usable_cores(), compute=compute)
        loaded.scores = scores
        return loaded
    if engine == "onnxruntime":
        from nmt.engines.onnx_runtime import load_onnx_member

        member = load_onnx_member(files, inf.threads or 0, int8=inf.quantize == "int8")  # 0: onnxruntime's choice
    else:
        from nmt.engines.compiled_runtime import load_compiled_member

        member = load_compiled_member(files, inf.trust_compiled, bf16=inf.bf16)
    loaded.ens = EnsembleModel([cast(torch.nn.Module, member)])  # duck-typed: TransformerModel's interface
    return loaded


def make_translator(gen: GenerationConfig, inf: InferenceConfig, data: DataDir, seed: int, *,
                    scores: bool = True) -> TranslatorLike:
    """nmt-generate's and nmt-interactive's translator: ``inf.engine`` loaded, with ``gen``'s search."""
    return load_engine(inf, data, gen, scores=scores).translator(gen, seed)
