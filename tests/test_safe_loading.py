"""A checkpoint can never run code, and code is imported only from a --user-dir the user names.

Each hostile checkpoint is fed to the real console scripts in a fresh process (nmt-generate,
nmt-interactive, nmt-train --restore-file and plain resume, nmt-average-checkpoints, nmt-validate,
nmt-import-fairseq checkpoint): every one must refuse it with one line naming the file, and the
canary file the pickle would create must never appear. A grep of the source tree keeps unsafe loaders
(``weights_only=False``, ``pickle.load``, ``allow_pickle=True``, ``yaml.load``) and stray import machinery out of
the product code."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nmt.checkpoint.errors import CheckpointError
from nmt.checkpoint.format import load_checkpoint
from train_toy_data import TINY_MODEL, make_toy_task

REPO = Path(__file__).resolve().parents[1]
PRODUCT_FOLDERS = ("nmt", "cli", "plugins", "scripts", "benchmarks", "examples", "studies")


class _Hostile:
    """Unpickling this calls ``call(*args)``: each variant would create the canary file."""

    def __init__(self, how: str, canary: Path):
        self.how, self.canary = how, canary

    def __reduce__(self):
        if self.how == "os.system":
            return os.system, (f"touch {self.canary}",)
        if self.how == "builtins.exec":
            return exec, (f"open({str(self.canary)!r}, 'w').close()",)
        if self.how == "subprocess":
            return subprocess.call, (["touch", str(self.canary)],)
        raise ValueError(self.how)


def write_hostile(path: Path, how: str, canary: Path, zip_format: bool = True) -> Path:
    """A file shaped like an nmt checkpoint whose pickle holds a call that would create ``canary``."""
    payload = {"format_version": 1, "model": {}, "training": {"epoch": 1}, "payload": _Hostile(how, canary)}
    if zip_format:
        with open(path, "wb") as f:
            torch.save(payload, f)  # by hand: save_checkpoint itself refuses such objects
    else:
        path.write_bytes(pickle.dumps(payload))  # the legacy (non-zip) torch format: a bare pickle
    return path


@pytest.mark.parametrize("zip_format", [True, False], ids=["torch-zip", "bare-pickle"])
@pytest.mark.parametrize("how", ["os.system", "builtins.exec", "subprocess"])
def test_load_checkpoint_refuses_every_payload(tmp_path, how, zip_format):
    canary = tmp_path / "canary"
    path = write_hostile(tmp_path / "checkpoint_last.pt", how, canary, zip_format)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert not canary.exists()


def _cli(module: str, *argv, stdin: str | None = None) -> subprocess.CompletedProcess:
    """The command's real entry point in a fresh single-threaded process."""
    code = f"from nmt.cli.{module} import main; main()"
    return subprocess.run([sys.executable, "-c", code, *map(str, argv)], input=stdin, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    return make_toy_task(tmp_path_factory.mktemp("safe"), n_train=40, n_valid=4)


TRAIN = [*TINY_MODEL, "--num-threads", "1", "--max-tokens", "64", "--max-update", "1"]
COMMANDS = {
    "nmt-generate": lambda d, ck, save: ("generate", d, "--path", ck, "--gen-subset", "valid"),
    "nmt-interactive": lambda d, ck, save: ("interactive", d, "--path", ck),
    "nmt-train --restore-file": lambda d, ck, save: ("train", d, *TRAIN, "--save-dir", save, "--restore-file", ck),
    "nmt-train resume": lambda d, ck, save: ("train", d, *TRAIN, "--save-dir", save),  # finds checkpoint_last.pt
    "nmt-average-checkpoints": lambda d, ck, save: ("average_checkpoints", "--inputs", f"{ck}:{ck}", "--output",
                                                    save / "avg.pt"),
    "nmt-validate": lambda d, ck, save: ("validate", d, "--path", ck),
    "nmt-import-fairseq checkpoint": lambda d, ck, save: ("import_fairseq", "checkpoint", "--path", ck, "--data", d,
                                                          "--output", save / "avg.pt"),
}


@pytest.mark.slow  # a fresh process per command
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_refuses_a_hostile_checkpoint(data_bin, tmp_path, command):
    canary = tmp_path / "canary"
    save = tmp_path / "ck"
    save.mkdir()
    ckpt = write_hostile(save / "checkpoint_last.pt", "os.system", canary)  # also what plain resume picks up
    done = _cli(*COMMANDS[command](data_bin, ckpt, save), stdin="t1 t2\n")
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr
    assert lines[-1].startswith("nmt-") and f"checkpoint {ckpt} is refused" in lines[-1], done.stderr
    assert "code" in lines[-1]  # says why: loading it could run code
    assert not [ln for ln in lines if "error" in ln.lower()][1:], done.stderr  # one error line only
    assert not canary.exists()
    assert not (save / "avg.pt").exists()


def test_stored_user_dir_is_not_imported_unless_named(data_bin, tmp_path, capsys):
    """A checkpoint records the --user-dir it was trained with; loading it must not import that folder
    (it may not be the same code any more): the error tells the user to pass it."""
    from nmt.checkpoint.format import build_state, save_checkpoint
    from nmt.cli.generate import main as generate_main
    from test_generate_setup import call_cli

    plugins = tmp_path / "my_plugins"
    plugins.mkdir()
    canary = tmp_path / "imported"
    (plugins / "evil.py").write_text(f"open({str(canary)!r}, 'w').close()\n")
    state = build_state(model=torch.nn.Linear(1, 1), config={"common": {"user_dir": str(plugins)},
                                                              "model": {"attention": "only_in_my_plugins"}},
                        epoch=1, num_updates=1)
    state["plugins"] = [{"kind": "attention", "name": "only_in_my_plugins",
                         "origin": "nmt_user_dir_0_my_plugins.evil.X (evil.py)"}]
    save_checkpoint(tmp_path / "c.pt", state)
    code = call_cli(generate_main, [data_bin, "--path", tmp_path / "c.pt", "--gen-subset", "valid"])
    err = capsys.readouterr().err
    assert code == 2 and f"pass --user-dir {plugins}" in err and "Traceback" not in err, err
    assert not canary.exists()


# --------------------------------------------------------------------------- the source tree


def _product_sources() -> list[Path]:
    files = []
    for folder in PRODUCT_FOLDERS:
        files += sorted((REPO / folder).rglob("*.py")) if (REPO / folder).is_dir() else []
    assert len(files) > 50  # the tree was found
    return files


UNSAFE = {
    "weights_only=False": re.compile(r"weights_only\s*=\s*False"),
    "pickle.load / pickle.loads": re.compile(r"\b(c?pickle|dill|joblib)\.loads?\("),
    "numpy allow_pickle=True": re.compile(r"allow_pickle\s*=\s*True"),
    "yaml.load (not safe_load)": re.compile(r"\byaml\.(load|unsafe_load|full_load)\("),
    "eval / exec": re.compile(r"(?<![.\w])(?<!def )(eval|exec)\("),  # (a method named eval, nn.Module's, is no call)
    "torch.serialization.add_safe_globals": re.compile(r"add_safe_globals"),
}


@pytest.mark.parametrize("name", list(UNSAFE))
def test_no_unsafe_loader_in_the_product_code(name):
    hits = [f"{p.relative_to(REPO)}:{i}" for p in _product_sources()
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if UNSAFE[name].search(line) and not line.lstrip().startswith("#")]
    assert not hits, f"{name} in {hits}"


TORCH_LOAD = re.compile(r"torch\.load\(((?:[^()]|\([^()]*\))*)\)")  # the call with its arguments, over lines


def test_every_torch_load_is_weights_only():
    calls = [(p, m.group(1)) for p in _product_sources() for m in TORCH_LOAD.finditer(p.read_text(encoding="utf-8"))]
    assert calls  # the pattern sees the real loader (nmt/checkpoint/safe_read.py)
    unsafe = [f"{p.relative_to(REPO)}: torch.load({args})" for p, args in calls
              if not re.search(r"weights_only\s*=\s*True", args)]
    assert not unsafe, unsafe


IMPORT_MACHINERY = re.compile(r"\b(import_module|spec_from_file_location|exec_module|__import__|run_path|"
                              r"SourceFileLoader|entry_points)\b")


def test_code_is_imported_only_by_the_plugin_loader():
    """Importing code by a name or path taken from input happens in nmt/plugin_loader.py only
    (built-ins, installed entry points, --user-dir); nothing else turns data into imports."""
    allowed = {REPO / "nmt" / "plugin_loader.py",
               REPO / "scripts" / "gen_docs.py",  # a dev script importing nmt's own console-script modules
               REPO / "benchmarks" / "__main__.py",  # imports the benchmark its own table names, to run it
               REPO / "nmt" / "registry.py"}  # each kind's base class, named by a constant of the core
    hits = [f"{p.relative_to(REPO)}:{i}" for p in _product_sources() if p not in allowed
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if IMPORT_MACHINERY.search(line) and not line.lstrip().startswith("#")]
    assert not hits, hits


def test_user_dir_code_runs_only_when_named(tmp_path, monkeypatch):
    """Loading plugins without --user-dir imports nothing from a plugin folder lying around."""
    from nmt.plugin_loader import load_plugins

    canary = tmp_path / "imported"
    folder = tmp_path / "plugins_here"
    folder.mkdir()
    (folder / "p.py").write_text(f"open({str(canary)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)  # a plugin folder right here is still not imported unasked
    load_plugins(None)
    assert not canary.exists()
    load_plugins(str(folder))
    assert canary.exists()
