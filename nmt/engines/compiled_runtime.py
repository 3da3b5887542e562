"""``--engine compiled``: the ahead-of-time compiled packages of a model folder (nmt.engines.compiled_export) as an
ensemble member (nmt.engines.member.StepMember) that nmt's own searches drive.

A package is native code, and loading it runs it. So before a byte of it is mapped, each package is read into
memory once and checked: its sha256 must be engine.json's, it must have been built for this torch and this CPU
(nmt.engines.build_target), and it must be in this user's record of packages built here (nmt.engines.trust) unless
the caller passes ``trust_compiled``. Only then are those very bytes (not the file, which could change meanwhile)
loaded, from a private copy.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from nmt.bounded_read import read_bounded, read_json
from nmt.config.model import ModelConfig
from nmt.engines.build_target import mismatch, this_machine
from nmt.engines.compiled_export import ENGINE, ENGINE_FILE, FORMAT_VERSION
from nmt.engines.member import StepMember
from nmt.engines.trust import record_path, sha256_hex, trusted
from nmt.errors import DataError, NmtError, UsageError
from nmt.fields import to_dataclass

PARTS = ("encoder", "decoder_step")
MAX_PACKAGE_BYTES = 8 << 30  # a package holds the weights: far beyond any model nmt trains on a CPU
MAX_RECORD_BYTES = 1 << 20


def _fix(folder: Path) -> str:
    return f"export it again on this machine: nmt-export --path {folder.parent} --with compiled --force"


def read_engine_record(folder: Path) -> dict[str, Any]:
    """The checked engine.json of a compiled export folder; one line naming it when missing, damaged or newer."""
    path = folder / ENGINE_FILE
    fix = _fix(folder)
    record = read_json(path, MAX_RECORD_BYTES, "compiled engine record", DataError, fix,
                       missing=f"{path}: missing; the folder holds no compiled export; {fix}")
    if not isinstance(record, dict) or record.get("engine") != ENGINE:
        raise DataError(f"{path}: not a compiled engine record; {fix}")
    version = record.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise DataError(f"{path}: compiled export format {version!r} is not one this nmt reads ({FORMAT_VERSION}); "
                        f"upgrade nmt, or {fix}")
    _check_parts(record, path, fix)
    if not (isinstance(record.get("model_config"), dict) and isinstance(record.get("shares_encoder_rows"), bool)
            and isinstance(record.get("built_for"), dict)):
        raise DataError(f"{path}: \"model_config\", \"shares_encoder_rows\" or \"built_for\" is missing; {fix}")
    return record


def _check_parts(packages: Any, path: Path, fix: str) -> None:
    """Refuse, naming engine.json, a set of packages without each part's file (in the folder) and sha256."""
    for part in PARTS:
        entry = packages.get(part) if isinstance(packages, dict) else None
        if not (isinstance(entry, dict) and isinstance(entry.get("file"), str) and "/" not in entry["file"]
                and entry["file"] not in ("", ".", "..") and isinstance(entry.get("sha256"), str)):
            raise DataError(f"{path}: \"{part}\" must give its \"file\" and \"sha256\"; {fix}")


def checked_package(folder: Path, entry: dict[str, Any], built_for: dict[str, Any], here: dict[str, str],
                    trust_compiled: bool) -> bytes:
    """The bytes of one package of ``folder`` once they may run here: engine.json's sha256, built for this torch and
    CPU (by the trust record's account when it lists them, else by engine.json's), and built by this user here
    unless ``trust_compiled``."""
    path = folder / entry["file"]
    data = read_bounded(path, MAX_PACKAGE_BYTES, "compiled package", DataError, _fix(folder))
    digest = sha256_hex(data)
    if digest != entry["sha256"]:
        raise DataError(f"{path}: its sha256 is not the one {ENGINE_FILE} records (changed since it was exported); "
                        f"{_fix(folder)}")
    known = trusted(digest)
    reason = mismatch(known if known is not None else built_for, here)
    if reason is not None:
        raise NmtError(f"{path}: a compiled package cannot run here: {reason}; {_fix(folder)}, or translate with "
                       "--engine onnxruntime or torch")
    if known is None and not trust_compiled:
        raise NmtError(f"{path}: a compiled package you did not build on this machine (it is not in {record_path()}), "
                       "and loading it runs its native code: pass --trust-compiled if you trust where it came from, "
                       f"or {_fix(folder)}")
    return data


def _open_package(data: bytes) -> Callable[[list[Tensor]], list[Tensor]]:
    """Load the package ``data`` (its checked bytes, written to a private file for the loader, which unpacks it)."""
    with tempfile.TemporaryDirectory(prefix="nmt-compiled-") as private:  # mode 0700
        path = os.path.join(private, "package.pt2")
        with open(path, "wb") as f:
            f.write(data)
        aoti = getattr(torch._C, "_aoti", None)
        loader_type = getattr(aoti, "AOTIModelPackageLoader", None)
        if loader_type is not None:  # the loader itself: torch._inductor's wrapper costs a second of imports
            loader = loader_type(path, "model", False, 1, -1)  # model name, single-threaded, runners, device
            return loader.run
        from torch._inductor import aoti_load_package

        model = aoti_load_package(path)
        return lambda inputs: list(model(*inputs))


def load_compiled_member(folder: str | Path, trust_compiled: bool = False, *, bf16: bool = False) -> StepMember:
    """The compiled export in ``folder`` (a model folder's compiled/, or the model folder) as an ensemble member,
    run with this process's threads (torch.set_num_threads); ``bf16``: its bf16 packages (exported with
    ``export_compiled(..., bf16=True)``). Refused in one line, before any of its code is loaded: a package built for
    another torch or CPU, changed since export, or not built by this user on this machine (unless
    ``trust_compiled``)."""
    folder = Path(folder)
    if not (folder / ENGINE_FILE).exists() and (folder / "compiled" / ENGINE_FILE).exists():
        folder = folder / "compiled"
    record = read_engine_record(folder)
    packages: Any = record
    if bf16:
        packages = record.get("bfloat16")
        if packages is None:
            raise UsageError(f"--bf16: {folder} holds no bf16 compiled packages; add them with nmt-export --path "
                             f"{folder.parent} --with compiled --compiled-precision both --force, or drop --bf16")
        _check_parts(packages, folder / ENGINE_FILE, _fix(folder))
    here = this_machine()
    data = [checked_package(folder, packages[part], record["built_for"], here, trust_compiled) for part in PARTS]
    cfg: ModelConfig = to_dataclass(ModelConfig, record["model_config"])
    run_encoder, run_step = (_open_package(d) for d in data)
    max_source = cfg.max_source_positions

    def encode(src_tokens: Tensor) -> list[Tensor]:
        if src_tokens.size(1) > max_source:  # the compiled code reads its position table without a bounds check
            raise ValueError(f"source of {src_tokens.size(1)} tokens: the model takes at most {max_source}")
        return run_encoder([src_tokens.contiguous()])

    def step(inputs: Sequence[Tensor]) -> list[Tensor]:
        return run_step([t.contiguous() for t in inputs])  # the compiled code assumes the traced (dense) layouts

    return StepMember(cfg, encode, step, shares_encoder_rows=record["shares_encoder_rows"], engine=ENGINE,
                      merges_rows=record.get("merges_rows") is True)  # absent in exports older than the record
