"""Stand-ins for the onnx and compiled engines, registered by a test (never by nmt): an export that writes a
small file, and a runtime whose "step" is the folder's own torch model (it has the StepMember interface), so
that the export command, the model folder's records, the engine selection and nmt's searches over an engine's
members are tested apart from the exporters themselves."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

from nmt.engines import export as engine_export
from nmt.engines.export import EngineExport
from nmt.errors import NmtError


def _check(model, src, tgt) -> None:
    pass


def _write(name: str):
    def write(model, src, tgt, out: Path, choices) -> None:
        (out / "engine.json").write_text(json.dumps({"engine": name, "format_version": 1, "stub": True}))
        (out / "step.bin").write_bytes(b"\0" * 64)

    return write


def _failing(model, src, tgt, out: Path, choices) -> None:
    (out / "engine.json").write_text("{\"half\": ")
    raise NmtError("nmt-export --with compiled: the stand-in failed half-way")


def register_exports(monkeypatch, *, compiled_fails: bool = False) -> None:
    """nmt-export --with onnx / compiled write the stand-ins' files (compiled: fails after a first file)."""
    monkeypatch.setitem(engine_export.WRITERS, "onnx", EngineExport(_check, _write("onnxruntime")))
    monkeypatch.setitem(engine_export.WRITERS, "compiled",
                        EngineExport(_check, _failing if compiled_fails else _write("compiled")))


class Loads:
    """What the stand-in runtimes were asked to load (engine, files folder)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Path]] = []


def register_runtimes(monkeypatch, *, compiled_error: str | None = None) -> Loads:
    """``--engine onnxruntime`` / ``compiled`` load the folder's torch model as their step (compiled: refused
    with ``compiled_error`` when given, as a package built elsewhere is)."""
    from nmt.data.data_bin import open_data_dir
    from nmt.generation.loading import load_model

    loads = Loads()

    def member(engine: str, files: Path):
        loads.calls.append((engine, files))
        folder = files.parent
        data = open_data_dir(str(folder), None, None)
        return load_model(str(folder), data.src_dict, data.tgt_dict)

    def load_compiled(files: Path, trust: bool, bf16: bool = False):
        if compiled_error:
            raise NmtError(compiled_error)
        return member("compiled", files)

    onnx = types.ModuleType("nmt.engines.onnx_runtime")
    onnx.load_onnx_member = (  # type: ignore[attr-defined]
        lambda files, threads, int8=False: member("onnxruntime int8" if int8 else "onnxruntime", files))
    compiled = types.ModuleType("nmt.engines.compiled_runtime")
    compiled.load_compiled_member = load_compiled  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nmt.engines.onnx_runtime", onnx)
    monkeypatch.setitem(sys.modules, "nmt.engines.compiled_runtime", compiled)
    return loads
