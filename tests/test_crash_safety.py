"""Crash safety: a full disk during a checkpoint save keeps the previous checkpoint and stops
`nmt-train` in one line; every file the project writes goes through a temp file + rename."""

from __future__ import annotations

import ast
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.checkpoint.format import load_checkpoint
from nmt.fileio import DiskFullError, atomic_write, atomic_write_text
from train_toy_data import make_toy_task

ROOT = Path(__file__).resolve().parents[1]
FAULT_POINTS = Path(__file__).with_name("fault_points.py")


# --------------------------------------------------------------------------- a full disk


def test_full_disk_keeps_the_old_file_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / "dict.en.txt"
    atomic_write_text(target, "old\n")
    with pytest.raises(DiskFullError) as info:
        with atomic_write(target) as f:
            f.write("new, half")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dict.en.txt"]
    message = str(info.value)
    assert str(target) in message and "disk is full" in message and "\n" not in message


def test_other_write_errors_are_not_called_a_full_disk(tmp_path):
    with pytest.raises(PermissionError):
        with atomic_write(tmp_path / "x.txt"):
            raise PermissionError(errno.EACCES, "denied")
    assert not list(tmp_path.iterdir())


def test_full_disk_inside_torch_save_is_recognised(tmp_path):
    """torch.save reports a failed write as a RuntimeError whose context is the ENOSPC OSError."""
    import torch

    from fault_points import _FullDisk
    from nmt.checkpoint.format import save_checkpoint

    target = tmp_path / "checkpoint_last.pt"
    save_checkpoint(target, {"training": {"num_updates": 1}, "w": torch.zeros(10)})
    with pytest.raises(DiskFullError):
        with atomic_write(target, "wb") as f:
            torch.save({"w": torch.zeros(100_000)}, _FullDisk(f, 4096))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_last.pt"]
    assert load_checkpoint(target, check_plugins_registered=False)["training"]["num_updates"] == 1


def _train(data: Path, save_dir: Path, fault: str | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("NMT_TEST_FAULT", None)
    if fault:
        env["NMT_TEST_FAULT"] = fault
    args = [str(data), "--arch", "transformer_tiny", "--encoder-layers", "1", "--decoder-layers", "1",
            "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
            "--decoder-ffn-embed-dim", "32", "--share-all-embeddings", "--max-tokens", "128", "--max-update", "6",
            "--save-interval-updates", "1", "--disable-validation", "--save-dir", str(save_dir), "--seed", "3",
            "--no-progress-bar", "--cpu", "--num-threads", "1"]
    return subprocess.run([sys.executable, str(FAULT_POINTS), *args], capture_output=True, text=True, env=env,
                          timeout=240)


@pytest.mark.slow  # two nmt-train processes: ~10 s on a busy machine
def test_full_disk_during_a_checkpoint_save_stops_nmt_train_and_keeps_the_last_checkpoint(tmp_path):
    data = make_toy_task(tmp_path / "toy", n_train=200, n_valid=8)
    save_dir = tmp_path / "ckpt"
    done = _train(data, save_dir, "disk-full:4")  # the write of update 4's checkpoint fails after 4 KB
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("nmt-train: error: update 4: "), error
    assert "disk is full" in error and f"the last good checkpoint is {save_dir / 'checkpoint_1_3.pt'}" in error
    assert load_checkpoint(save_dir / "checkpoint_last.pt")["training"]["num_updates"] == 3  # intact
    assert not (save_dir / "checkpoint_1_4.pt").exists()
    assert not list(save_dir.glob(".*.tmp")), "the failed save left its temp file behind"
    resumed = _train(data, save_dir, None)  # space freed: the run resumes from update 3 and finishes
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "update 3" in next(line for line in resumed.stderr.splitlines() if "resumed from" in line)
    assert load_checkpoint(save_dir / "checkpoint_last.pt")["training"]["num_updates"] == 6


# --------------------------------------------------------------------------- every writer is atomic

# Writers that are not atomic on purpose, with the reason. Anything else that writes a file must do it
# inside `with atomic_write(...)` (nmt.fileio), so that a crash leaves the old file or the new one.
NOT_ATOMIC_ON_PURPOSE = {
    ("nmt/training/train_log.py", "append_line"): "append-only JSON lines log; one write per line (a line cut "
                                                  "off by a kill is dropped by the next run)",
    # nmt-preprocess and nmt-import-fairseq write the whole data-bin in a private temp folder that is
    # renamed into place at the end (nmt.data.data_dir.move_into_place): these write inside it.
    ("nmt/data/binarizer.py", "_run_text_range"): "a shard in the preprocess temp folder",
    ("nmt/data/binarizer.py", "text_pass"): "a text file in the preprocess temp folder",
    ("nmt/data/corpus_files.py", "as_plain_file"): "a decompressed input copy in the preprocess temp folder",
    ("nmt/data/indexed_dataset.py", "ShardWriter.__init__"): "a shard in the preprocess temp folder",
    ("nmt/data/indexed_dataset.py", "merge_shards"): "the .bin in the preprocess temp folder",
    ("nmt/data/indexed_dataset.py", "write_index"): "the .idx in the preprocess temp folder",
    ("nmt/data/preprocess.py", "_binarize_splits"): "raw/ and text/ copies in the preprocess temp folder",
    ("nmt/data/preprocess.py", "_run_in"): "the dictionaries and codes copied to every shard in the temp folder",
    ("nmt/data/data_shards.py", "deal_lines"): "the training text of each shard in the preprocess temp folder",
    ("nmt/interop/fairseq_data.py", "convert_data_bin"): "bpe.codes copy in the import temp folder",
    # nmt-export fills a temporary sibling of --output, renamed into place when complete (_folder_in_place)
    ("nmt/model_folder/export.py", "export_model_folder"): "the model folder's files in the export temp folder",
    ("nmt/engines/export.py", "add_engines"): "model.json and the card in the temp folder moved into place last",
    ("nmt/engines/onnx_export.py", "_write"): "engine.json, last, in the onnx/ folder nmt-export builds in its temp "
                                              "folder (a folder without it is refused as damaged)",
    # not an artifact: the checked bytes of a compiled package, in a private 0700 folder the loader reads them from
    ("nmt/engines/compiled_runtime.py", "_open_package"): "a private copy for the package loader, deleted after",
}
_WRITE_CALLS = {("torch", "save"), ("np", "save"), ("numpy", "save"), ("np", "savez"), ("json", "dump"),
                ("pickle", "dump"), ("yaml", "dump"), ("shutil", "copyfile"), ("shutil", "copy"), ("shutil", "copy2")}
_WRITE_METHODS = {"write_text", "write_bytes", "savefig", "tofile"}


def _writes_a_file(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else None
        if (owner, func.attr) in _WRITE_CALLS or func.attr in _WRITE_METHODS:
            return True
    if (getattr(func, "id", None) or getattr(func, "attr", None)) == "open":
        mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(c in mode.value for c in "wax+")
    return False


class _WriterFinder(ast.NodeVisitor):
    """Every call that writes a file outside a ``with atomic_write(...)`` block: (function, line, code)."""

    def __init__(self) -> None:
        self.scope: list[str] = []
        self.atomic = 0
        self.found: list[tuple[str, int, str]] = []

    def _scoped(self, node: ast.AST) -> None:
        self.scope.append(node.name)  # type: ignore[attr-defined]
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_With(self, node: ast.With) -> None:
        atomic = any(isinstance(i.context_expr, ast.Call) and "atomic_write" in ast.unparse(i.context_expr.func)
                     for i in node.items)
        for item in node.items:
            self.visit(item)
        self.atomic += atomic
        for statement in node.body:
            self.visit(statement)
        self.atomic -= atomic

    def visit_Call(self, node: ast.Call) -> None:
        if _writes_a_file(node) and not self.atomic:
            self.found.append((".".join(self.scope) or "<module>", node.lineno, ast.unparse(node)[:80]))
        self.generic_visit(node)


def _non_atomic_writers() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for folder in ("nmt", "cli", "plugins"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            finder = _WriterFinder()
            finder.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
            for function, line, code in finder.found:
                key = (path.relative_to(ROOT).as_posix(), function)
                found.setdefault(key, []).append(f"line {line}: {code}")
    return found


def test_every_file_writer_goes_through_atomic_write():
    """A new writer of a final artifact (checkpoint, dictionary, codes, results, plot, ...) that skips
    atomic_write fails here; a deliberate exception is added to NOT_ATOMIC_ON_PURPOSE with its reason."""
    unexpected = {k: v for k, v in _non_atomic_writers().items() if k not in NOT_ATOMIC_ON_PURPOSE}
    assert not unexpected, "write these through nmt.fileio.atomic_write: " + "; ".join(
        f"{f} {fn}: {', '.join(lines)}" for (f, fn), lines in unexpected.items())


def test_the_writer_finder_sees_the_usual_ways_to_write():
    source = ("def f(p, state, fig):\n    open(p, 'w').write('x')\n    torch.save(state, p)\n"
              "    p.write_text('x')\n    fig.savefig(p)\n    open(p).read()\n"
              "    with atomic_write(p, 'wb') as out:\n        torch.save(state, out)\n")
    finder = _WriterFinder()
    finder.visit(ast.parse(source))
    assert [line for _, line, _ in finder.found] == [2, 3, 4, 5]



def test_a_full_disk_anywhere_else_is_one_line_too(capsys):
    """A full disk outside atomic_write (e.g. preprocess filling its temp folder) is still one line."""
    import errno

    from nmt.cli.common import report_error

    code = report_error("nmt-x", OSError(errno.ENOSPC, "No space left on device", "/data/x.bin"), debug=False)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "disk is full" in err[0] and "/data/x.bin" in err[0]
