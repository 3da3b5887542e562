"""``--engine onnxruntime``: the ONNX export of a model folder (nmt.engines.onnx_export) run by onnxruntime, as an
ensemble member (nmt.engines.member.StepMember) that nmt's own searches drive. Loading reads two graphs and a
JSON file: it runs no code from the folder.

Both sessions run fp32 (or the export's int8 graphs, ``int8``) on the CPU with every graph optimisation (constant
folding, fused attention and layer norms, ...) applied when loading, ``threads`` intra-op threads each (they never
run at the same time; 0: onnxruntime's choice, a thread per physical core) and no inter-op parallelism (the graphs
are one chain of operators).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from nmt.config.model import ModelConfig
from nmt.engines.member import StepMember
from nmt.engines.onnx_export import ENGINE_FILE, FORMAT_VERSION, need_onnx
from nmt.errors import DataError, UsageError
from nmt.fields import to_dataclass

FIX = "export it again: nmt-export ... --with onnx --force"
ONE_THREAD_TOKENS = 16  # int8 graphs given at most this many tokens run on one thread (SmallOnOneThread)


def read_engine_record(folder: Path) -> dict[str, Any]:
    """The checked engine.json of an ONNX export folder; one line naming it when damaged or newer."""
    path = folder / ENGINE_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: missing; the folder holds no ONNX export; {FIX}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: not readable ({type(e).__name__}); {FIX}") from None
    if not isinstance(record, dict) or record.get("engine") != "onnxruntime":
        raise DataError(f"{path}: not an ONNX engine record; {FIX}")
    version = record.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise DataError(f"{path}: ONNX export format {version!r} is not one this nmt reads ({FORMAT_VERSION}); "
                        "upgrade nmt, or " + FIX)
    parts = ("encoder", "decoder_step")
    for part in parts:
        entry: Any = record.get(part)
        if not (_names_a_file(entry) and all(isinstance(entry.get(k), list) for k in ("inputs", "outputs"))):
            raise DataError(f"{path}: \"{part}\" must give its \"file\", \"inputs\" and \"outputs\"; {FIX}")
    int8 = record.get("int8")  # absent in exports without int8 graphs (and in those older than them)
    if int8 is not None and not (isinstance(int8, dict) and all(_names_a_file(int8.get(p)) for p in parts)):
        raise DataError(f"{path}: \"int8\" must give the \"file\" of its \"encoder\" and \"decoder_step\"; {FIX}")
    if not isinstance(record.get("model_config"), dict) or not isinstance(record.get("shares_encoder_rows"), bool):
        raise DataError(f"{path}: \"model_config\" or \"shares_encoder_rows\" is missing; {FIX}")
    return record


def _names_a_file(entry: Any) -> bool:
    """Whether a graph's entry of engine.json names a file of the folder itself (no path)."""
    return isinstance(entry, dict) and isinstance(entry.get("file"), str) and "/" not in entry["file"]


def session(path: Path, threads: int) -> Any:
    """An onnxruntime CPU session of the graph at ``path``, all graph optimisations, ``threads`` intra-op threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # warnings about unused initializers and the like are not the user's to act on
    # no spinning between runs: a search's own operators (top-k, cache reordering) run on the same cores between
    # two steps, and threads spinning for the next run slow them down
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types for a damaged graph
        raise DataError(f"{path}: onnxruntime cannot load it ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                        f"{FIX}") from None


class OnnxGraph:
    """One ONNX session called with torch tensors in a fixed input order, giving torch tensors (sharing the
    numpy arrays onnxruntime returns: no copy)."""

    def __init__(self, sess: Any, inputs: list[str], outputs: list[str]):
        self.sess = sess
        self.inputs = inputs
        self.outputs = outputs

    def __call__(self, tensors: Sequence[Tensor]) -> list[Tensor]:
        feeds = {name: np.ascontiguousarray(t.numpy()) for name, t in zip(self.inputs, tensors)}
        return [torch.from_numpy(a) for a in self.sess.run(self.outputs, feeds)]


class SmallOnOneThread:
    """An int8 graph run on one thread when its first input holds at most ``ONE_THREAD_TOKENS`` tokens (a lone
    sentence, or its beams' step: a server's usual request), else on the session's threads: a few tokens' int8
    products are too small to share, and waking other threads for each operator costs more than they save (as
    CTranslate2's int8 with one thread against two shows on a lone sentence; benchmarks/RESULTS.md#engines)."""

    def __init__(self, one_thread: OnnxGraph, threads: OnnxGraph):
        self.one_thread = one_thread
        self.threads = threads

    def __call__(self, tensors: Sequence[Tensor]) -> list[Tensor]:
        tokens = tensors[0].numel()  # the encoder's src_tokens (b, S); the step's tokens (b, G), one per row
        return (self.one_thread if tokens <= ONE_THREAD_TOKENS else self.threads)(tensors)


def load_onnx_member(folder: str | Path, threads: int, int8: bool = False) -> StepMember:
    """The ONNX export in ``folder`` (a model folder's onnx/, or the model folder) as an ensemble member run by
    onnxruntime with ``threads`` intra-op threads; ``int8``: its int8 graphs (``--quantize int8``), whose runs of a
    few tokens take one thread (SmallOnOneThread)."""
    need_onnx("--engine onnxruntime")
    folder = Path(folder)
    if not (folder / ENGINE_FILE).exists() and (folder / "onnx" / ENGINE_FILE).exists():
        folder = folder / "onnx"
    record = read_engine_record(folder)
    cfg: ModelConfig = to_dataclass(ModelConfig, record["model_config"])
    enc, dec = record["encoder"], record["decoder_step"]
    if int8:
        if "int8" not in record:
            raise UsageError(f"--quantize int8: {folder} holds no int8 ONNX graphs; add them with nmt-export --path "
                             f"{folder.parent} --with onnx --onnx-precision both --force, or drop --quantize")
        enc, dec = ({**part, "file": record["int8"][name]["file"]} for name, part in (("encoder", enc),
                                                                                     ("decoder_step", dec)))
    graphs: list[Callable[[Sequence[Tensor]], list[Tensor]]] = []
    for part in (enc, dec):
        graph = OnnxGraph(session(folder / part["file"], threads), part["inputs"], part["outputs"])
        if int8 and threads != 1:
            one = OnnxGraph(session(folder / part["file"], 1), part["inputs"], part["outputs"])
            graphs.append(SmallOnOneThread(one, graph))
        else:
            graphs.append(graph)
    encoder, step = graphs

    def encode(src_tokens: Tensor) -> list[Tensor]:
        return encoder([src_tokens])

    return StepMember(cfg, encode, step, shares_encoder_rows=record["shares_encoder_rows"], engine="onnxruntime",
                      merges_rows=record.get("merges_rows") is True)  # absent in exports older than the record
