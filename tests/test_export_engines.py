"""nmt-export --with onnx,compiled,ctranslate2 (issue 60, item 2): each engine's files in its sub-folder of the
model folder, listed in model.json (with sizes and sha256) and in the model card; an unknown name is one line
listing the known ones; a failed engine export leaves nothing; --path MODEL_DIR --with adds engines in place
(--force: again); --force on the folder replaces the engine files nmt-export wrote and keeps the user's.

ctranslate2 is the real exporter; onnx and compiled are stand-ins registered by the tests (tests/engine_stubs.py),
so that these tests check the command and the folder, not the exporters (their own tests do)."""

from __future__ import annotations

import json
import shutil

import pytest

from engine_stubs import register_exports
from model_folder_setup import export
from nmt.cli.export import main as export_main
from reliability_helpers import checksums, fails_cleanly
from test_model_folder import FILES, copy_folder, leftovers

ctranslate2 = pytest.importorskip("ctranslate2")


def manifest_of(folder) -> dict:
    return json.loads((folder / "model.json").read_text())


def test_with_writes_each_engine_in_its_sub_folder_listed_in_the_manifest_and_the_card(exported_model, tmp_path,
                                                                                     monkeypatch, capsys):
    register_exports(monkeypatch)
    out = tmp_path / "model"
    m = exported_model
    assert export(m.data, "--path", m.pair[-1], "--output", out, "--with", "ctranslate2, onnx,compiled,onnx") == 0
    assert "with ctranslate2/, onnx/, compiled/" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == FILES | {"onnx", "compiled", "ctranslate2"}
    assert ctranslate2.contains_model(str(out / "ctranslate2"))
    records = {r["name"]: r for r in manifest_of(out)["engines"]}
    assert {n: r["engine"] for n, r in records.items()} == {
        "onnx": "onnxruntime", "compiled": "compiled", "ctranslate2": "ctranslate2"}
    on_disk = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.parent != out}
    assert on_disk == {f for r in records.values() for f in r["files"]}
    assert all(facts["bytes"] == (out / f).stat().st_size for r in records.values() for f, facts in r["files"].items())
    card = (out / "README.md").read_text()
    assert "## Engines" in card
    for engine, folder in (("onnxruntime", "onnx"), ("compiled", "compiled"), ("ctranslate2", "ctranslate2")):
        assert f"**{engine}** (`{folder}/`" in card
    assert "loading it runs it" in card and "--trust-compiled" in card  # the trust rule, on the card
    assert leftovers(tmp_path) == []


def test_a_folder_without_engines_lists_none_and_has_no_engine_section(exported_model):
    assert manifest_of(exported_model.folder)["engines"] == []
    assert "## Engines" not in (exported_model.folder / "README.md").read_text()


def test_with_takes_the_engine_names_too():
    """``--with onnxruntime,compiled`` (the names --engine takes, as ../shared/tools/peer_decode_speed.sh passes
    them) exports onnx and compiled, each once."""
    from nmt.engines.export import parse_with

    assert parse_with("onnxruntime, compiled,onnx,ctranslate2") == ["onnx", "compiled", "ctranslate2"]


def test_an_unknown_engine_is_one_line_listing_the_known_ones(exported_model, tmp_path, capsys):
    m = exported_model
    for given, needle in (("onnx,tensorrt", "--with tensorrt: unknown engine export"),
                          ("onnxruntime,torch", "--with torch: unknown engine export")):
        line = fails_cleanly(export_main, "nmt-export", [m.data, "--path", m.pair[-1], "--output", tmp_path / "out",
                                                         "--with", given], 2, (needle,), [tmp_path], capsys)
        assert line.endswith("known: onnx, compiled, ctranslate2")
    fails_cleanly(export_main, "nmt-export", [m.data, "--path", m.pair[-1], "--output", tmp_path / "out", "--with",
                                              "onnx", "--format", "ctranslate2"], 2, ("--format ctranslate2",),
                  [tmp_path], capsys)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_engine_export_leaves_nothing(exported_model, tmp_path, monkeypatch, capsys):
    """The stand-in compiled export fails after writing a file: neither the folder nor the engines written
    before it are left (nor a work folder)."""
    register_exports(monkeypatch, compiled_fails=True)
    m = exported_model
    fails_cleanly(export_main, "nmt-export", [m.data, "--path", m.pair[-1], "--output", tmp_path / "new" / "model",
                                              "--with", "onnx,compiled"], 1, ("the stand-in failed half-way",),
                  [tmp_path], capsys)
    assert list(tmp_path.iterdir()) == []


def test_what_ctranslate2_cannot_run_is_refused_before_anything_is_written(exported_model, tmp_path, monkeypatch,
                                                                           capsys):
    """The checks of every engine run before the first is written (the slow compiled one included)."""
    import nmt.interop.ctranslate2_export as ct2_export

    register_exports(monkeypatch)
    monkeypatch.setattr(ct2_export, "unsupported", lambda model: "the model's attention is 'mine'")
    m = exported_model
    fails_cleanly(export_main, "nmt-export", [m.data, "--path", m.pair[-1], "--output", tmp_path / "model",
                                              "--with", "compiled,ctranslate2"], 2,
                  ("nmt-export --with ctranslate2: the model's attention is 'mine'", "export without it"),
                  [tmp_path], capsys)
    assert list(tmp_path.iterdir()) == []


def test_with_on_a_model_folder_adds_engines_in_place(exported_model, tmp_path, monkeypatch, capsys):
    register_exports(monkeypatch)
    folder = copy_folder(exported_model.folder, tmp_path / "model")
    (folder / "NOTES.txt").write_text("mine\n")
    before = checksums(folder / "model.safetensors", folder / "dict.en.txt", folder / "NOTES.txt")
    assert export("--path", folder, "--with", "onnx") == 0
    assert f"added onnx/ to {folder}" in capsys.readouterr().out
    assert export("--path", folder, "--output", folder, "--with", "ctranslate2") == 0
    assert [r["name"] for r in manifest_of(folder)["engines"]] == ["onnx", "ctranslate2"]
    assert {p.name for p in folder.iterdir()} == FILES | {"NOTES.txt", "onnx", "ctranslate2"}
    assert checksums(folder / "model.safetensors", folder / "dict.en.txt", folder / "NOTES.txt") == before
    assert "**ctranslate2**" in (folder / "README.md").read_text()
    # again: refused without --force, nothing changed; with --force written again
    watched = checksums(folder)
    fails_cleanly(export_main, "nmt-export", ["--path", folder, "--with", "onnx"], 2,
                  ("holds onnx/ already", "--force"), [folder], capsys)
    (folder / "onnx" / "step.bin").write_bytes(b"edited")
    assert export("--path", folder, "--with", "onnx", "--force") == 0
    assert (folder / "onnx" / "step.bin").read_bytes() == b"\0" * 64
    assert checksums(folder / "ctranslate2") == {k: v for k, v in watched.items() if "/ctranslate2" in k}
    assert leftovers(tmp_path) == []


def test_adding_an_engine_refuses_a_sub_folder_nmt_did_not_write_and_another_output(exported_model, tmp_path,
                                                                                   monkeypatch, capsys):
    register_exports(monkeypatch)
    folder = copy_folder(exported_model.folder, tmp_path / "model")
    (folder / "onnx").mkdir()
    (folder / "onnx" / "mine.txt").write_text("mine")
    fails_cleanly(export_main, "nmt-export", ["--path", folder, "--with", "onnx"], 2,
                  ("onnx exists and nmt-export did not write it", "move it away"), [tmp_path], capsys)
    fails_cleanly(export_main, "nmt-export", ["--path", folder, "--with", "compiled", "--output", tmp_path / "x"],
                  2, ("adds engines to the model folder", "in place"), [tmp_path], capsys)


def test_a_failed_engine_added_in_place_leaves_the_folder_as_it_was(exported_model, tmp_path, monkeypatch, capsys):
    register_exports(monkeypatch, compiled_fails=True)
    folder = copy_folder(exported_model.folder, tmp_path / "model")
    fails_cleanly(export_main, "nmt-export", ["--path", folder, "--with", "onnx,compiled"], 1,
                  ("stand-in failed",), [tmp_path], capsys)
    assert leftovers(tmp_path) == []


def test_force_replaces_the_engine_files_nmt_wrote_and_removes_those_no_longer_asked_for(exported_model, tmp_path,
                                                                                       monkeypatch):
    register_exports(monkeypatch)
    m, out = exported_model, tmp_path / "model"
    assert export(m.data, "--path", m.pair[-1], "--output", out, "--with", "onnx,compiled") == 0
    (out / "compiled" / "NOTES.txt").write_text("the user's, inside an engine folder\n")
    assert export(m.data, "--path", m.pair[0], "--output", out, "--with", "onnx", "--force") == 0
    assert [r["name"] for r in manifest_of(out)["engines"]] == ["onnx"]
    assert sorted(p.name for p in (out / "compiled").iterdir()) == ["NOTES.txt"]  # only the user's file is left
    shutil.rmtree(out / "compiled")
    assert export(m.data, "--path", m.pair[0], "--output", out, "--force") == 0
    assert manifest_of(out)["engines"] == [] and not (out / "onnx").exists()  # the emptied folder too
    assert leftovers(tmp_path) == []


def test_a_bf16_folders_engines_compute_with_the_weights_it_stores(exported_model, tmp_path):
    """--bf16 stores bf16-rounded weights, which the torch engine loads: the engines are exported from the same
    rounded weights, so they give the torch engine's log-probabilities, not the checkpoint's."""
    import nmt

    m, out = exported_model, tmp_path / "model"
    assert export(m.data, "--path", m.pair[-1], "--output", out, "--with", "ctranslate2", "--bf16") == 0
    sentences = ["the cat sat on the mat.", "a big red dog ran!"]
    ours = nmt.load(out, engine="ctranslate2", threads=1).translate_detailed(sentences, beam=1)
    theirs = nmt.load(out, engine="torch", threads=1).translate_detailed(sentences, beam=1)
    ct2 = ctranslate2.Translator(str(out / "ctranslate2"), device="cpu", intra_threads=1)
    for a, b in zip(ours, theirs):
        assert a.hypotheses[0].tokens == b.hypotheses[0].tokens
        scored = ct2.score_batch([a.source_tokens + ["</s>"]], [a.hypotheses[0].tokens])[0].log_probs
        assert scored == pytest.approx(b.hypotheses[0].positional_scores, abs=1e-4)
