"""``nmt-export --with compiled``: the encoder and the decoder step of nmt.engines.step compiled ahead of time for
this CPU and this torch (torch.export, then AOTInductor), into ``DIR/compiled/``:

    encoder.pt2        EncoderForExport, (sentences, source length) dynamic
    decoder_step.pt2   DecoderStep, (sentences, rows per sentence, source length, cached steps) dynamic
    engine.json        what they were built for (torch, CPU), their sha256, the flat input/output names
    encoder.bf16.pt2, decoder_step.bf16.pt2   with ``bf16``: the same with bf16 weights and products

Compiled once here, a step runs with no Python between its operators and no compilation in the process that
loads it. The packages are native code built with this CPU's instructions (``-march=native``), so they run only
where they were built (nmt.engines.build_target), and, since loading them runs their code, only for the user who
built them or says ``--trust-compiled`` (nmt.engines.trust, which this export adds them to).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from torch import Tensor, nn

from nmt.engines.build_target import this_machine
from nmt.engines.onnx_export import example_sources, step_inputs
from nmt.engines.step import (
    DecoderStep,
    EncoderForExport,
    attention_modules,
    check_exportable,
    encoder_names,
    masks_left_pads,
    shares_encoder_rows,
    step_names,
)
from nmt.engines.trust import add_trusted, sha256_hex
from nmt.errors import NmtError, UsageError
from nmt.fileio import atomic_write_text
from nmt.models.transformer import TransformerModel

ENGINE = "compiled"
FORMAT_VERSION = 1
ENGINE_FILE = "engine.json"
# Sizes of the example the graphs are traced with. Every size is dynamic, but inductor takes them as hints when it
# decides how to split loops between threads: a batch of sentences being decoded, not a toy (and no size of 0 or 1,
# which torch.export would fix in the graph).
EXAMPLE_SENTENCES, EXAMPLE_BEAMS, EXAMPLE_SOURCE, EXAMPLE_CACHED = 32, 4, 24, 8
# compiled vs torch at export: the same arithmetic, other kernels and fusions (bf16: other roundings of 8-bit
# mantissas on the way; the check is there for sizes fixed while tracing and for gross errors)
CHECK_TOLERANCE = {"float32": 1e-4, "bfloat16": 0.25}
PRECISIONS = {"float32": (torch.float32, ""), "bfloat16": (torch.bfloat16, ".bf16")}  # -> dtype, file suffix
INDUCTOR_OPTIONS: dict[str, Any] = {
    "freezing": True,  # weights are constants of the compiled code (inference only): folded and laid out once
    "max_autotune": False,  # its kernel search costs minutes per shape for little at these sizes
    "cpp.dynamic_threads": True,  # kernels use the threads of the process that runs them, not of the exporting one
    "compile_threads": 1,  # no pool of compiler workers left in the exporting process
}


def check_compiled_export(model: nn.Module) -> TransformerModel:
    """Refuse, in one line and before anything is compiled, what ``export_compiled`` could not build: a model the
    step cannot trace, or a machine without the C++ compiler AOTInductor calls."""
    model = check_exportable(model)
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        get_cpp_compiler()
    except Exception as e:  # inductor's own error types differ between torch versions
        raise UsageError(f"--with compiled needs the C++ compiler that AOTInductor calls ({str(e).splitlines()[0]}); "
                         "install g++ (or set CXX), or export without compiled") from None
    return model


@contextmanager
def private_build_dir() -> Iterator[None]:
    """Inductor's cache in a fresh folder of this process (mode 0700), removed afterwards: the packages are built
    from this export's graphs alone, never from cached code another process (or user, in a shared /tmp) left."""
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    folder = tempfile.mkdtemp(prefix="nmt-compiled-")
    try:
        with temporary_cache_dir(folder):
            yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _dims(model: TransformerModel) -> dict[str, Any]:
    from torch.export import Dim

    return {"sentences": Dim("sentences", min=1), "beams": Dim("beams", min=1),
            "source": Dim("source", min=1, max=model.max_source_positions),
            "cached": Dim("cached", min=0, max=model.max_target_positions)}


def _traced(what: str, module: nn.Module, args: tuple[Tensor, ...], dynamic: tuple[Any, ...]) -> Any:
    """torch.export of ``module`` on ``args``; a graph it cannot trace with these dynamic sizes is one line."""
    try:
        return torch.export.export(module, args, dynamic_shapes=dynamic, strict=False)
    except Exception as e:  # torch.export's errors are of many types; their first line says what it met
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(f"--with compiled: torch.export cannot trace the {what} of this model ({first}); "
                         "translate it with --engine torch or --with onnx") from None


def _check(package: Path, module: nn.Module, args: Sequence[Tensor], what: str, precision: str) -> None:
    """The compiled ``package`` must give the torch module's outputs on ``args`` (other sizes than the traced ones):
    a size fixed while tracing is refused here, not found while translating."""
    from torch._inductor import aoti_load_package

    with torch.no_grad():
        expected = module(*args)
        got = aoti_load_package(str(package))(*args)
    for i, (want, have) in enumerate(zip(expected, got)):
        if tuple(have.shape) != tuple(want.shape):
            raise NmtError(f"the compiled {what} gives output {i} of shape {tuple(have.shape)} where the model gives "
                           f"{tuple(want.shape)}: a size was fixed while tracing; translate with --engine torch")
        diff = float((have.float() - want.float()).abs().max()) if want.numel() else 0.0
        if not diff <= CHECK_TOLERANCE[precision]:
            raise NmtError(f"the compiled {what} differs from the model by {diff:.3g} in output {i}; translate with "
                           "--engine torch")


def _inputs(args: Sequence[Tensor], dtype: torch.dtype) -> tuple[Tensor, ...]:
    """``args`` with their floating-point tensors (keys and values) in ``dtype``."""
    return tuple(a.to(dtype) if a.is_floating_point() else a for a in args)


def _build(model: TransformerModel, out: Path, precision: str) -> dict[str, dict[str, Any]]:
    """Compile the encoder and the decoder step of ``model`` (in ``precision``'s dtype) into ``out``, check them,
    and return their engine.json entries (file, sha256, input and output names)."""
    from torch._inductor import aoti_compile_and_package
    from torch.export import Dim

    dtype, suffix = PRECISIONS[precision]
    encoder, step = EncoderForExport(model), DecoderStep(model)
    layers = step.layers
    b, G = Dim("sentences", min=1), Dim("rows_per_sentence", min=1)
    S = Dim("source_length", min=1, max=model.max_source_positions)
    T = Dim("cache_length", min=0, max=model.max_target_positions)
    per_layer = [{0: b, 1: G, 3: T}] * 2 + [{0: b, 2: S}] * 2  # self_k, self_v (b, G, H, t, d); cross (b, H, S, d)
    files = {"encoder": f"encoder{suffix}.pt2", "decoder_step": f"decoder_step{suffix}.pt2"}
    with torch.no_grad():
        src = example_sources(model, EXAMPLE_SENTENCES, EXAMPLE_SOURCE, seed=0)
        traced = _inputs(step_inputs(step, encoder(src), EXAMPLE_BEAMS, EXAMPLE_CACHED, seed=1), dtype)
        programs = {
            "encoder": _traced("encoder", encoder, (src,), ({0: b, 1: S},)),
            "decoder_step": _traced("decoder step", step, traced,
                                    ({0: b, 1: G}, {0: b, 1: G}, {0: b, 1: S}, tuple(per_layer * layers))),
        }
        for part, program in programs.items():
            aoti_compile_and_package(program, package_path=str(out / files[part]), inductor_configs=INDUCTOR_OPTIONS)
        for rows, length, group, t in ((1, 1, 1, 0), (3, 7, 5, 9)):  # one sentence at its first step; a batch later
            src = example_sources(model, rows, length, seed=rows)
            _check(out / files["encoder"], encoder, (src,), "encoder", precision)
            args = _inputs(step_inputs(step, encoder(src), group, t, seed=t), dtype)
            _check(out / files["decoder_step"], step, args, "decoder step", precision)
    names = {"encoder": encoder_names(layers), "decoder_step": step_names(layers)}
    return {part: {"file": file, "sha256": sha256_hex((out / file).read_bytes()), "inputs": names[part][0],
                   "outputs": names[part][1]} for part, file in files.items()}


def export_compiled(model: nn.Module, out_dir: str | Path, *, bf16: bool = False) -> Path:
    """Write ``out_dir``/encoder.pt2, decoder_step.pt2 and engine.json for ``model`` (a TransformerModel in fp32,
    its weights as they are), checked against the model on other sizes than the traced ones, and add the packages
    to this user's trust record; returns ``out_dir``. ``bf16``: also encoder.bf16.pt2 and decoder_step.bf16.pt2, the
    model with bf16 weights (its products in bf16: faster where the CPU has bf16 instructions, with other roundings,
    so other hypotheses now and then)."""
    model = check_compiled_export(model)
    if any(p.dtype != torch.float32 for p in model.parameters()):
        raise UsageError("--with compiled: export the model in float32 (the compiled engine runs fp32)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    built_for = this_machine()
    with private_build_dir():  # one for both precisions: the second reuses the first's precompiled headers
        packages = _build(model, out, "float32")
        low = _build(copy.deepcopy(model).to(torch.bfloat16).eval(), out, "bfloat16") if bf16 else None
    attn = next(module for role, module in attention_modules(model) if role == "decoder")
    record: dict[str, Any] = {
        "engine": ENGINE, "format_version": FORMAT_VERSION, **packages,
        "layers": len(model.decoder.layers), "heads": attn.num_heads, "key_dim": attn.key_dim,
        "value_dim": attn.head_dim, "vocabulary": model.decoder.embed_tokens.num_embeddings,
        "shares_encoder_rows": shares_encoder_rows(model), "merges_rows": masks_left_pads(model),
        "precision": "float32", "built_for": built_for,
        "inductor": {k: v for k, v in INDUCTOR_OPTIONS.items() if k != "compile_threads"},
        "model_config": dataclasses.asdict(model.cfg),
    }
    if low is not None:
        record["bfloat16"] = low
    atomic_write_text(out / ENGINE_FILE, json.dumps(record, indent=1) + "\n")
    built = [packages, *([low] if low is not None else [])]
    add_trusted({entry["sha256"]: entry["file"] for parts in built for entry in parts.values()}, built_for)
    return out
