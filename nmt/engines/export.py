"""``nmt-export --with onnx,compiled,ctranslate2``: each engine's files in a sub-folder of the model folder
(``onnx/``, ``compiled/``, ``ctranslate2/``), listed in model.json with their sizes and sha256 and in the model card.

Every engine is checked against the model before any is written (a plugin it cannot run is one line), and all are
written into the private folder the model folder is built in, so a failure leaves nothing: neither a half-written
sub-folder nor the others. ``--path MODEL_DIR --with NAME`` adds engines to a folder nmt-export wrote, in place
(``--force`` exports one it already holds again); nothing else of the folder changes but model.json and README.md.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from torch import nn

from nmt.data.dictionary import Dictionary
from nmt.engines import EXPORT_OF, EXPORTS
from nmt.errors import UsageError
from nmt.model_folder.engine_files import describe, records
from nmt.model_folder.export import EngineWriter

# a file each export surely writes: checked against the user's files in --output before the slow part
MARKERS = {"onnx": "onnx/engine.json", "compiled": "compiled/engine.json", "ctranslate2": "ctranslate2/model.bin"}


@dataclass(frozen=True)
class ExportChoices:
    """What the exports are built with beyond the model: ``compiled_bf16``, whether compiled/ also holds bf16
    packages (``--compiled-precision``); ``onnx_int8``, whether onnx/ also holds int8 graphs (``--onnx-precision``)."""

    compiled_bf16: bool = False
    onnx_int8: bool = False


@dataclass(frozen=True)
class EngineExport:
    """How one ``--with`` name is written: ``check`` refuses (one line) a model it cannot run, before anything is
    written; ``write`` fills the empty folder it is given."""

    check: Callable[[nn.Module, Dictionary, Dictionary], None]
    write: Callable[[nn.Module, Dictionary, Dictionary, Path, ExportChoices], None]


def _check_step(model: nn.Module, src: Dictionary, tgt: Dictionary) -> None:
    from nmt.engines.step import check_exportable

    check_exportable(model)


def _write_onnx(model: nn.Module, src: Dictionary, tgt: Dictionary, out: Path, choices: ExportChoices) -> None:
    from nmt.engines.onnx_export import export_onnx

    export_onnx(model, out, int8=choices.onnx_int8)


def _check_compiled(model: nn.Module, src: Dictionary, tgt: Dictionary) -> None:
    from nmt.engines.compiled_export import check_compiled_export

    check_compiled_export(model)


def _write_compiled(model: nn.Module, src: Dictionary, tgt: Dictionary, out: Path, choices: ExportChoices) -> None:
    from nmt.engines.compiled_export import export_compiled

    export_compiled(model, out, bf16=choices.compiled_bf16)


def _check_ctranslate2(model: nn.Module, src: Dictionary, tgt: Dictionary) -> None:
    from nmt.errors import ConfigError
    from nmt.interop.ctranslate2_export import unsupported

    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise UsageError("nmt-export --with ctranslate2 needs the ctranslate2 package: pip install "
                         "'nmt[ctranslate2]'") from None
    problem = unsupported(model)
    if problem is not None:
        raise ConfigError(f"nmt-export --with ctranslate2: {problem}; export without it")


def _write_ctranslate2(model: nn.Module, src: Dictionary, tgt: Dictionary, out: Path, choices: ExportChoices) -> None:
    from nmt.interop.ctranslate2_export import export_ctranslate2

    export_ctranslate2(model, src, tgt, out)


# --with name -> its export (the onnx and compiled exporters are imported when used: their packages are optional)
WRITERS: dict[str, EngineExport] = {
    "onnx": EngineExport(_check_step, _write_onnx),
    "compiled": EngineExport(_check_compiled, _write_compiled),
    "ctranslate2": EngineExport(_check_ctranslate2, _write_ctranslate2),
}


def parse_with(text: str) -> list[str]:
    """The export names of ``--with`` (comma-separated), in the order given, each once; an engine's own name stands
    for its export (``onnxruntime`` for ``onnx``: the names ``--engine`` takes work here too). An unknown one is one
    line listing the known ones."""
    given = [n.strip() for n in text.split(",") if n.strip()]
    if not given:
        raise UsageError(f"--with {text!r}: name the engines to export: {', '.join(EXPORTS)}")
    for name in given:
        if name not in EXPORTS and name not in EXPORT_OF:
            raise UsageError(f"--with {name}: unknown engine export; known: {', '.join(EXPORTS)}")
    return list(dict.fromkeys(EXPORT_OF.get(name, name) for name in given))


def engine_writer(names: Sequence[str], src: Dictionary, tgt: Dictionary,
                  choices: ExportChoices = ExportChoices()) -> EngineWriter:
    """What ``export_model_folder(engines=...)`` calls: every export checked, then each written into its sub-folder
    of the folder being built; their model.json records."""

    def write(model: nn.Module, folder: Path) -> list[dict[str, Any]]:
        for name in names:
            WRITERS[name].check(model, src, tgt)
        found = []
        for name in names:
            (folder / name).mkdir()
            WRITERS[name].write(model, src, tgt, folder / name, choices)
            found.append(describe(folder, name, EXPORTS[name]))
        return found

    return write


def export_choices(compiled_precision: str, onnx_precision: str) -> ExportChoices:
    """``--compiled-precision``: float32; both (float32 and bfloat16 packages); auto: both where this CPU has bf16
    matrix instructions (elsewhere bf16 products are emulated, slower than fp32). ``--onnx-precision``: float32;
    both (float32 and int8 graphs)."""
    from nmt.hardware import bf16_instructions

    both = compiled_precision == "both" or (compiled_precision == "auto" and bf16_instructions())
    return ExportChoices(compiled_bf16=both, onnx_int8=onnx_precision == "both")


def marker_files(names: Sequence[str]) -> list[str]:
    return [MARKERS[n] for n in names]


def add_engines(folder: str | Path, names: Sequence[str], *, force: bool = False,
                choices: ExportChoices = ExportChoices()) -> Path:
    """Add the exports ``names`` to the model folder ``folder`` in place; one it already holds is refused unless
    ``force`` (then written again). model.json and README.md are rewritten last; the rest is left alone."""
    from nmt.data.data_bin import open_data_dir
    from nmt.data.metadata import read_metadata
    from nmt.data.work_dirs import clean_leftovers, new_work_dir, release
    from nmt.generation.loading import load_model
    from nmt.model_folder.card import model_card
    from nmt.model_folder.layout import CARD, MANIFEST, read_manifest
    from nmt.owned_files import move_files_into
    from nmt.signals import stop_signals_deferred

    folder = Path(folder).resolve()
    manifest = read_manifest(folder)
    held = records(manifest, folder)
    for name in names:
        if name in held and not force:
            raise UsageError(f"--with {name}: {folder} holds {name}/ already; pass --force to export it again")
        if name not in held and ((folder / name).exists() or (folder / name).is_symlink()):
            raise UsageError(f"--with {name}: {folder / name} exists and nmt-export did not write it; move it away")
    data = open_data_dir(str(folder), None, None)
    model = load_model(str(folder), data.src_dict, data.tgt_dict)  # its weights checked against model.json
    clean_leftovers(folder)
    tmp = new_work_dir(folder, "tmp")
    try:
        new = {r["name"]: r for r in engine_writer(names, data.src_dict, data.tgt_dict, choices)(model, tmp)}
        manifest["engines"] = [new.get(n) or held[n] for n in EXPORTS if n in new or n in held]
        (tmp / MANIFEST).write_text(_json(manifest), encoding="utf-8")
        (tmp / CARD).write_text(model_card(manifest, read_metadata(folder)), encoding="utf-8")
        release(tmp)
        with stop_signals_deferred():
            move_files_into(tmp, folder, MANIFEST)  # model.json last: until then the old one names the old files
            for name in set(names) & set(held):  # the replaced exports' files the new ones do not have
                for file in set(held[name]["files"]) - set(new[name]["files"]):
                    (folder / file).unlink(missing_ok=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def _json(value: Any) -> str:
    import json

    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"
