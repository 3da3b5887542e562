"""The engine files of a model folder (``nmt-export --with onnx,compiled,ctranslate2``): one sub-folder per
export, listed in model.json's ``"engines"`` with every file's size and sha256.

    "engines": [{"name": "onnx", "engine": "onnxruntime", "files": {"onnx/encoder.onnx": {"bytes": ..., "sha256":
                 ...}, ...}}, ...]

A folder written before engines existed has no such key: it has none, and runs with the torch engine. The list
is what nmt-export owns besides the folder's other files (``--force`` replaces them, a user's files beside them
are kept), and what loading checks before an engine reads a byte: a file changed, truncated or replaced is
refused in one line, as the weights are.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from nmt.bounded_read import regular_file
from nmt.checkpoint.errors import CheckpointError
from nmt.model_folder.layout import MANIFEST, sha256_of

ENGINES = "engines"  # the manifest's key
NAME = re.compile(r"[a-z0-9_]+")  # an export's name, and its sub-folder


def export_again(folder: str | Path, name: str) -> str:
    """The fix of a damaged or missing engine export: write it again in place."""
    return f"export it again: nmt-export --path {folder} --with {name} --force"


def records(manifest: dict[str, Any], folder: str | Path) -> dict[str, dict[str, Any]]:
    """The export name -> its record, of the manifest of ``folder`` (checked: ``check_records``); none for a
    folder written before engines."""
    check_records(manifest, Path(folder) / MANIFEST)
    return {r["name"]: r for r in manifest.get(ENGINES, [])}


def owned_files(manifest: dict[str, Any], folder: str | Path) -> set[str]:
    """Every engine file the manifest of ``folder`` lists (relative paths)."""
    return {file for record in records(manifest, folder).values() for file in record["files"]}


def check_records(manifest: dict[str, Any], path: Path) -> None:
    """Refuse, in one line naming model.json, an ``"engines"`` entry that is not a list of records whose files
    lie in the record's own sub-folder (no absolute path, no "..")."""
    records = manifest.get(ENGINES, [])
    fix = "the file is damaged; export the model again with nmt-export"
    if not isinstance(records, list):
        raise CheckpointError(f"{path}: \"{ENGINES}\" must be a list; {fix}")
    for record in records:
        if not (isinstance(record, dict) and isinstance(record.get("name"), str) and NAME.fullmatch(record["name"])
                and isinstance(record.get("engine"), str) and isinstance(record.get("files"), dict)
                and record["files"]):
            raise CheckpointError(f"{path}: \"{ENGINES}\" must list {{\"name\", \"engine\", \"files\"}} records; {fix}")
        for file, facts in record["files"].items():
            parts = file.split("/")
            if parts[0] != record["name"] or len(parts) < 2 or any(p in ("", ".", "..") for p in parts[1:]):
                raise CheckpointError(f"{path}: engine file {file!r} is not inside {record['name']}/; {fix}")
            if not (isinstance(facts, dict) and isinstance(facts.get("bytes"), int)
                    and isinstance(facts.get("sha256"), str)):
                raise CheckpointError(f"{path}: engine file {file} lacks its \"bytes\" and \"sha256\"; {fix}")


def describe(folder: Path, name: str, engine: str) -> dict[str, Any]:
    """The record of the export ``name`` (run by ``engine``) just written into ``folder/name``: its regular files
    with their sizes and sha256."""
    files = sorted(p for p in (folder / name).rglob("*") if p.is_file() and not p.is_symlink())
    return {"name": name, "engine": engine,
            "files": {str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": sha256_of(p)} for p in files}}


def verify(folder: str | Path, record: dict[str, Any]) -> Path:
    """The sub-folder of ``record`` once each of its files is a regular file of the recorded size and sha256;
    else a CheckpointError naming the file."""
    folder = Path(folder)
    fix = export_again(folder, record["name"])
    for file, facts in record["files"].items():
        path = folder / file
        size = regular_file(path, CheckpointError, fix,
                            missing=f"{path}: missing; the {record['name']} export is incomplete; {fix}").st_size
        if size != facts["bytes"]:
            raise CheckpointError(f"{path}: {size} bytes where {MANIFEST} records {facts['bytes']} (truncated or "
                                  f"replaced); {fix}")
        if sha256_of(path) != facts["sha256"]:
            raise CheckpointError(f"{path}: its content does not match the sha256 in {MANIFEST} (the file was changed "
                                  f"or damaged); {fix}")
    return folder / record["name"]
