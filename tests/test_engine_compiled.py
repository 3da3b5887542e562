"""The compiled engine (issue 60, items 2-4): nmt-export --with compiled builds an AOTInductor package of the
encoder and of the decoder step that nmt-generate --engine compiled runs to the torch engine's hypotheses (greedy
and beam 5, a windowed cache too; with --bf16 its bf16 packages); a package built for another torch or CPU
is refused in one line; a package this user did not build on this machine (copied in: simulated by another
XDG_CACHE_HOME, where the record of trusted packages lives) is refused in one line naming --trust-compiled, and
loads with it.

Each compilation takes about a minute: the tests that need one share a module-scoped export."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path

import pytest
import torch

from engine_models import copy_batch, outputs, recorded_search, trained_tiny
from model_folder_setup import export
from nmt.cli.generate import main as generate_main
from nmt.engines import build_target, compiled_runtime, trust
from nmt.engines.compiled_export import ENGINE_FILE, export_compiled
from nmt.engines.compiled_runtime import load_compiled_member
from nmt.errors import DataError, NmtError, UsageError
from reliability_helpers import fails_cleanly
from test_generate_setup import call_cli
from test_model_folder import copy_folder

MACHINE = {"torch": "2.13.0+cpu", "machine": "x86_64", "cpu": "Some CPU", "cpu_flags": "avx avx2 fma sse2"}


@pytest.fixture(scope="module")
def own_cache(tmp_path_factory):
    """This module's XDG_CACHE_HOME: the exports below record their packages there, as this user's."""
    with pytest.MonkeyPatch.context() as mp:
        cache = tmp_path_factory.mktemp("xdg")
        mp.setenv("XDG_CACHE_HOME", str(cache))
        yield cache


@pytest.fixture(scope="module")
def compiled_folder(exported_model, own_cache, tmp_path_factory) -> Path:
    """The exported tiny model folder with its compiled/, fp32 and bf16 packages (nmt-export --path MODEL_DIR --with
    compiled --compiled-precision both)."""
    folder = copy_folder(exported_model.folder, tmp_path_factory.mktemp("compiled") / "model")
    assert export("--path", folder, "--with", "compiled", "--compiled-precision", "both") == 0
    return folder


def generate(capsys, *argv) -> str:
    capsys.readouterr()
    code = call_cli(generate_main, [str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def hypotheses(out: str) -> dict[int, str]:
    """nmt-generate's H- lines: sentence id -> hypothesis (without its score)."""
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^H-(\d+)\t[^\t]*\t(.*)$", out, re.M)}


# --------------------------------------------------------------------------- what a build is for (no compiling)


def test_a_build_runs_only_on_its_torch_and_cpu():
    here = dict(MACHINE)
    assert build_target.mismatch(MACHINE, here) is None
    assert build_target.mismatch(MACHINE, {**here, "cpu_flags": here["cpu_flags"] + " avx512f"}) is None  # more: fine
    assert "torch 2.12.0 and this is torch 2.13.0+cpu" in build_target.mismatch({**MACHINE, "torch": "2.12.0"}, here)
    assert "'Other CPU'" in build_target.mismatch({**MACHINE, "cpu": "Other CPU"}, here)
    assert "lacks (amx_tile avx512f)" in build_target.mismatch({**MACHINE, "cpu_flags": "amx_tile avx512f"}, here)
    assert build_target.mismatch({}, here) is not None  # a record without the facts never passes
    machine = build_target.this_machine()
    assert machine["torch"] == torch.__version__ and machine["cpu"] and machine["cpu_flags"]


# --------------------------------------------------------------------------- the trust record (no compiling)


def test_the_record_is_the_users_own_file_outside_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = trust.record_path()
    assert path == tmp_path / "nmt" / "trusted-compiled.json"
    assert trust.read_record() == {} and trust.trusted("a" * 64) is None
    trust.add_trusted({"a" * 64: "encoder.pt2"}, MACHINE)
    trust.add_trusted({"b" * 64: "decoder_step.pt2"}, MACHINE)  # a second export keeps the first one's
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert trust.trusted("a" * 64)["file"] == "encoder.pt2" and trust.trusted("b" * 64)["cpu"] == "Some CPU"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # not absolute: ignored, as the XDG rule says
    assert trust.record_path() == Path.home() / ".cache" / "nmt" / "trusted-compiled.json"


def test_a_damaged_record_or_one_others_may_write_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    trust.add_trusted({"a" * 64: "encoder.pt2"}, MACHINE)
    path = trust.record_path()
    os.chmod(path, 0o666)
    with pytest.raises(NmtError, match=f"writable by other users .*chmod 600 {path}$"):
        trust.trusted("a" * 64)
    os.chmod(path, 0o600)
    for damaged in ("{\"packages\": ", json.dumps({"format_version": 1, "packages": {"not a sha": {}}})):
        path.write_text(damaged)
        with pytest.raises(NmtError) as e:
            trust.trusted("a" * 64)
        assert str(e.value).startswith(str(path)) and "delete" in str(e.value) and "\n" not in str(e.value)


# --------------------------------------------------------------------------- parity with the torch engine


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 5])
def test_compiled_engine_finds_the_torch_engines_hypotheses(exported_model, compiled_folder, capsys, beam):
    m = exported_model
    ours = generate(capsys, m.data, "--path", compiled_folder, "--engine", "compiled", "--beam", beam)
    reference = generate(capsys, m.data, "--path", compiled_folder, "--engine", "torch", "--beam", beam)
    assert hypotheses(ours) == hypotheses(reference) and len(hypotheses(ours)) == 9
    record = json.loads((compiled_folder / "compiled" / ENGINE_FILE).read_text())
    assert record["built_for"] == build_target.this_machine()
    for part in ("encoder", "decoder_step"):  # the packages this user built are in the record outside the folder
        entry = trust.trusted(record[part]["sha256"])
        assert entry is not None and entry["torch"] == torch.__version__


@pytest.mark.slow
def test_bf16_runs_the_bf16_packages_and_auto_takes_them(exported_model, compiled_folder, capsys):
    """--bf16 with --engine compiled runs the bf16 packages (bf16 weights and products); auto with --bf16 takes compiled
    (onnxruntime cannot honour --bf16) and says so; a model this sure of its outputs finds the torch engine's
    hypotheses in bf16."""
    m = exported_model
    argv = [m.data, "--path", compiled_folder, "--beam", "5", "--bf16"]
    ours = generate(capsys, *argv, "--engine", "compiled")
    capsys.readouterr()
    assert call_cli(generate_main, [str(a) for a in argv]) == 0
    auto_out, auto_err = capsys.readouterr()
    assert "engine: compiled (auto)" in auto_err
    reference = generate(capsys, *argv, "--engine", "torch")
    assert hypotheses(ours) == hypotheses(auto_out) == hypotheses(reference) and len(hypotheses(ours)) == 9


@pytest.mark.slow
def test_a_windowed_cache_and_shared_encoder_rows_step_as_the_eager_decoder(tmp_path, own_cache):
    """Restricted attention keeps the last r + 1 keys (the cache stops growing) and beams share their sentence's
    encoder row: the compiled step takes the eager decoder's log-probabilities (1e-4) and finds its hypotheses."""
    model = trained_tiny("restricted", "sinusoidal")
    export_compiled(model, tmp_path / "compiled")
    member = load_compiled_member(tmp_path / "compiled")
    assert member.shares_encoder_rows
    src, lengths = copy_batch(24, seed=7)
    for options in ({"search": {"name": "greedy"}, "beam": 1}, {"beam": 5}):
        eager, eager_steps = recorded_search(model, src, lengths, **options)
        compiled, compiled_steps = recorded_search(member, src, lengths, **options)
        assert outputs(compiled) == outputs(eager)
        assert len(compiled_steps) == len(eager_steps) > 3
        for a, b in zip(compiled_steps, eager_steps):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=0)


# --------------------------------------------------------------------------- what may run here


@pytest.mark.slow
def test_a_copied_in_package_is_refused_naming_trust_compiled_and_loads_with_it(exported_model, compiled_folder,
                                                                                 tmp_path, monkeypatch, capsys):
    """Another user's (or another machine's) package: not in this user's record, so not loaded unless asked."""
    folder = copy_folder(compiled_folder, tmp_path / "from_elsewhere")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another_users_cache"))
    m = exported_model
    argv = [m.data, "--path", folder, "--engine", "compiled", "--beam", "5"]
    line = fails_cleanly(generate_main, "nmt-generate", argv, 1,
                         ("encoder.pt2", "you did not build on this machine",
                          "loading it runs its native code", "--trust-compiled"), [folder], capsys)
    assert str(tmp_path / "another_users_cache" / "nmt" / "trusted-compiled.json") in line
    trusted_out = generate(capsys, *argv, "--trust-compiled")
    reference = generate(capsys, m.data, "--path", folder, "--engine", "torch", "--beam", "5")
    assert hypotheses(trusted_out) == hypotheses(reference)
    assert not (tmp_path / "another_users_cache" / "nmt" / "trusted-compiled.json").exists()  # loading adds nothing


@pytest.mark.slow
def test_a_package_for_another_torch_or_cpu_is_refused_in_one_line(exported_model, compiled_folder, tmp_path,
                                                                   monkeypatch, capsys):
    """Even --trust-compiled does not load native code built for another torch or CPU: it would not run."""
    m = exported_model
    here = build_target.this_machine()
    monkeypatch.setattr(compiled_runtime, "this_machine", lambda: {**here, "torch": "9.9.9"})
    fails_cleanly(generate_main, "nmt-generate", [m.data, "--path", compiled_folder, "--engine", "compiled",
                                                  "--trust-compiled"], 1,
                  ("cannot run here", f"compiled by torch {torch.__version__} and this is torch 9.9.9",
                   f"nmt-export --path {compiled_folder} --with compiled --force"), [compiled_folder], capsys)
    monkeypatch.undo()
    # a package from another CPU (engine.json says so; not in this user's record, so engine.json is all there is)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another_users_cache"))
    copied = copy_folder(compiled_folder / "compiled", tmp_path / "compiled")
    record = json.loads((copied / ENGINE_FILE).read_text())
    record["built_for"]["cpu"] = "Another CPU"
    (copied / ENGINE_FILE).write_text(json.dumps(record))
    with pytest.raises(NmtError, match="compiled for a .* CPU 'Another CPU' and this one is a"):
        load_compiled_member(copied, trust_compiled=True)
    # this user's record says what the package was built for, whatever engine.json claims
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "record"))
    digest = record["decoder_step"]["sha256"]
    trust.add_trusted({record["encoder"]["sha256"]: "encoder.pt2"}, here)
    trust.add_trusted({digest: "decoder_step.pt2"}, {**here, "cpu_flags": here["cpu_flags"] + " amx_tile"})
    record["built_for"] = here
    (copied / ENGINE_FILE).write_text(json.dumps(record))
    with pytest.raises(NmtError, match=r"decoder_step.pt2: .*instructions this CPU lacks \(amx_tile\)"):
        load_compiled_member(copied)


@pytest.mark.slow
def test_a_changed_or_missing_package_is_refused_before_it_is_loaded(compiled_folder, tmp_path):
    copied = copy_folder(compiled_folder / "compiled", tmp_path / "compiled")
    with open(copied / "decoder_step.pt2", "r+b") as f:
        f.seek(100)
        f.write(b"\xff")
    with pytest.raises(DataError, match="decoder_step.pt2: its sha256 is not the one engine.json records"):
        load_compiled_member(copied)
    (copied / "encoder.pt2").unlink()
    with pytest.raises(DataError, match="encoder.pt2: missing"):
        load_compiled_member(copied)
    record = json.loads((copied / ENGINE_FILE).read_text())
    del record["bfloat16"]  # as exported with --compiled-precision float32
    (copied / ENGINE_FILE).write_text(json.dumps(record))
    with pytest.raises(UsageError, match="--bf16: .* holds no bf16 compiled packages; add them with nmt-export "
                                         "--path .* --with compiled --compiled-precision both --force"):
        load_compiled_member(copied, bf16=True)
    shutil.rmtree(copied)
    copied.mkdir()
    with pytest.raises(DataError, match="engine.json: missing; the folder holds no compiled export"):
        load_compiled_member(copied)
