"""What nmt reads from and writes to a model folder or a data-bin (issue 58, the files part).

nmt-export --force replaces only the files nmt-export writes and leaves the user's; every file read from a
folder is checked to be a regular file (a FIFO never blocks), bounded in size and JSON depth before it is
parsed, and refused in one line naming it; nmt.load says what a wrong path is; nothing advises deleting a
file nmt did not create. Every case runs the real command (in-process), nmt.load or nmt-serve."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Iterator

import pytest

import nmt
from model_folder_setup import export
from nmt.cli.export import main as export_main
from nmt.cli.generate import main as generate_main
from nmt.cli.interactive import main as interactive_main
from nmt.errors import NmtError, UsageError
from reliability_helpers import checksums, fails_cleanly
from test_model_folder import FILES, copy_folder, leftovers

DEEP = 100_000  # levels of nesting: Python's JSON parser would end in a RecursionError


@contextlib.contextmanager
def fifo_at(path: Path) -> Iterator[Path]:
    """A FIFO at ``path``. Should anything open it to read, a thread opens its writing end and closes it at
    once, so the reader meets the end of the file instead of waiting forever: a regression fails the test,
    it never hangs it."""
    os.mkfifo(path)
    done = threading.Event()

    def release_readers() -> None:
        while not done.wait(0.05):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # fails (ENXIO) while nobody reads
            except OSError:
                continue
            os.close(fd)

    thread = threading.Thread(target=release_readers, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        done.set()
        thread.join()


def nmt_load_error(*args, **kwargs) -> str:
    """nmt.load's one-line error (an NmtError, never another exception)."""
    with pytest.raises(NmtError) as info:
        nmt.load(*args, threads=1, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    return message


# --------------------------------------------------------------------------- item 1: --force keeps the user's files

@pytest.fixture
def folder_with_notes(exported_model, tmp_path) -> Path:
    """A model folder in which the user keeps notes and results of their own."""
    folder = copy_folder(exported_model.folder, tmp_path / "model")
    (folder / "NOTES.txt").write_text("trained on the cluster; BLEU to be checked\n")
    (folder / "results").mkdir()
    (folder / "results" / "test.hyp").write_text("Ein Mann .\n")
    return folder


def test_force_replaces_nmts_files_and_keeps_the_users(exported_model, folder_with_notes, tmp_path, capsys):
    folder, ckpt = folder_with_notes, exported_model.pair[0]
    inode = folder.stat().st_ino
    mine = checksums(folder / "results") | {"notes": (folder / "NOTES.txt").read_text()}
    capsys.readouterr()
    assert export(exported_model.data, "--path", ckpt, "--output", folder, "--force") == 0
    out = capsys.readouterr().out
    assert "left NOTES.txt, results in" in out and "did not write them" in out
    assert json.loads((folder / "model.json").read_text())["exported_from"] == [str(ckpt)]
    assert checksums(folder / "results") | {"notes": (folder / "NOTES.txt").read_text()} == mine
    assert {p.name for p in folder.iterdir()} == FILES | {"NOTES.txt", "results"}
    assert folder.stat().st_ino == inode and leftovers(tmp_path) == []  # the user's folder, filled in place
    model = nmt.load(folder, threads=1)  # the new files are consistent with each other
    assert model.translate(["the cat sat on the mat."], beam=1)[0]


def test_force_removes_the_files_an_earlier_export_wrote_and_no_longer_needs(exported_model, folder_with_notes):
    """An earlier export of another language (its dict.fr.txt, listed in its metadata.json) is nmt's to remove."""
    folder = folder_with_notes
    metadata = json.loads((folder / "metadata.json").read_text())
    metadata["langs"].append("fr")
    (folder / "metadata.json").write_text(json.dumps(metadata))
    shutil.copyfile(folder / "dict.en.txt", folder / "dict.fr.txt")
    (folder / "dict.it.txt").write_text("the user's own file of an nmt-like name\n")
    assert export(exported_model.data, "--path", exported_model.pair[0], "--output", folder, "--force") == 0
    assert not (folder / "dict.fr.txt").exists()
    assert (folder / "dict.it.txt").read_text() == "the user's own file of an nmt-like name\n"
    assert (folder / "NOTES.txt").is_file()


@pytest.mark.parametrize("obstacle", ["folder", "link", "fifo"])
def test_force_refuses_what_it_did_not_write_under_one_of_its_names(exported_model, folder_with_notes, tmp_path,
                                                                     capsys, obstacle):
    folder = folder_with_notes
    target = tmp_path / "elsewhere.safetensors"
    target.write_bytes((folder / "model.safetensors").read_bytes())
    (folder / "model.safetensors").unlink()
    with contextlib.ExitStack() as stack:
        if obstacle == "folder":
            (folder / "model.safetensors").mkdir()
            (folder / "model.safetensors" / "mine.txt").write_text("mine")
        elif obstacle == "link":
            (folder / "model.safetensors").symlink_to(target)
        else:
            stack.enter_context(fifo_at(folder / "model.safetensors"))
        kind = {"folder": "a folder", "link": "a symbolic link", "fifo": "a FIFO"}[obstacle]
        fails_cleanly(export_main, "nmt-export", [exported_model.data, "--path", exported_model.pair[0], "--output",
                                                  folder, "--force"], 2,
                      ("model.safetensors is " + kind, "nmt-export did not write", "move it away"),
                      [folder, target], capsys)
    assert leftovers(tmp_path) == []


def test_a_force_export_stopped_part_way_is_refused_on_loading_and_a_rerun_completes_it(
        exported_model, folder_with_notes, capsys, monkeypatch):
    """model.json is put in place last: stopped before it, the old manifest meets the new weights, so the folder
    is refused (not half-read), the user's files are intact, and --force again finishes the job."""
    import nmt.owned_files

    folder, ckpt = folder_with_notes, exported_model.pair[0]
    real_replace = os.replace

    def stop_before_the_manifest(src, dst):
        if Path(dst).name == "model.json":
            raise OSError(5, "Input/output error")
        real_replace(src, dst)

    monkeypatch.setattr(nmt.owned_files.os, "replace", stop_before_the_manifest)
    assert export(exported_model.data, "--path", ckpt, "--output", folder, "--force") == 1
    monkeypatch.setattr(nmt.owned_files.os, "replace", real_replace)
    message = nmt_load_error(folder)
    assert "model.safetensors" in message and "export the model again" in message
    assert (folder / "NOTES.txt").is_file() and (folder / "results" / "test.hyp").is_file()
    assert export(exported_model.data, "--path", ckpt, "--output", folder, "--force") == 0
    assert nmt.load(folder, threads=1).translate(["a dog ."], beam=1)[0]


def test_ctranslate2_fills_an_empty_folder_and_refuses_a_non_empty_one(exported_model, tmp_path, capsys):
    pytest.importorskip("ctranslate2")
    empty = tmp_path / "ct2"
    empty.mkdir()
    inode = empty.stat().st_ino
    argv = [exported_model.data, "--path", exported_model.pair[-1], "--format", "ctranslate2", "--output", empty]
    assert export(*argv) == 0
    assert empty.stat().st_ino == inode and (empty / "model.bin").is_file()  # the user's folder, not a new one
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "NOTES.txt").write_text("mine")
    fails_cleanly(export_main, "nmt-export", [*argv[:-1], tmp_path / "notes"], 2, ("not empty",),
                  [tmp_path / "notes"], capsys)


# --------------------------------------------------------------------------- item 11: what a wrong path is

@pytest.mark.parametrize("fmt", ["nmt", "ctranslate2"])
def test_an_output_under_a_file_is_named(exported_model, tmp_path, capsys, fmt):
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "afile").write_text("mine")
    line = fails_cleanly(export_main, "nmt-export", [exported_model.data, "--path", exported_model.pair[-1],
                                                     "--format", fmt, "--output", tmp_path / "exp/afile/sub"], 2,
                         ("--output", "exp/afile is a file, not a folder", "choose another --output"),
                         [tmp_path], capsys)
    assert "File exists" not in line


@pytest.mark.parametrize("replacement", ["fifo", "dev-zero"])
def test_weights_that_are_not_a_regular_file_are_named_not_missing(exported_model, tmp_path, capsys, replacement):
    folder = copy_folder(exported_model.folder, tmp_path / "model")
    weights = folder / "model.safetensors"
    weights.unlink()
    with contextlib.ExitStack() as stack:
        if replacement == "fifo":
            stack.enter_context(fifo_at(weights))
        else:
            weights.symlink_to("/dev/zero")
        kind = "a FIFO" if replacement == "fifo" else "a character device"
        for message in (nmt_load_error(folder),
                        fails_cleanly(interactive_main, "nmt-interactive",
                                      [folder, "--input", exported_model.raw / "test.en"], 1, (), [folder], capsys)):
            assert f"{weights}: is not a regular file ({kind}" in message and "missing" not in message


@pytest.mark.parametrize("name", ["model.json", "metadata.json", "dict.de.txt", "bpe.codes"])
def test_a_fifo_in_place_of_any_file_nmt_reads_is_named(exported_model, tmp_path, name):
    folder = copy_folder(exported_model.folder, tmp_path / "model")
    (folder / name).unlink()
    with fifo_at(folder / name):
        message = nmt_load_error(folder)
    assert f"{folder / name}: is not a regular file (a FIFO" in message


def test_a_fifo_given_as_checkpoint_is_named(exported_model, tmp_path):
    with fifo_at(tmp_path / "checkpoint_best.pt") as fifo:
        message = nmt_load_error(fifo, data=exported_model.data)
    assert "is not a regular file (a FIFO" in message and "delete" not in message


# --------------------------------------------------------------------------- item 7: bounded before parsed

def deep_json(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_a_deeply_nested_manifest_is_one_line_from_nmt_load_and_the_commands(exported_model, tmp_path, capsys):
    folder = copy_folder(exported_model.folder, tmp_path / "model")
    (folder / "model.json").write_text(deep_json(DEEP))
    message = nmt_load_error(folder)
    assert str(folder / "model.json") in message and "nested more than 64 levels" in message
    for main, prog, argv in [(interactive_main, "nmt-interactive", [folder, "--input", exported_model.raw / "test.en"]),
                             (generate_main, "nmt-generate", [exported_model.data, "--path", folder])]:
        line = fails_cleanly(main, prog, argv, 1, ("model.json", "nested more than"), [folder], capsys)
        assert "internal error" not in line and "delete" not in line


def test_a_deeply_nested_or_huge_data_bin_metadata_is_one_line(exported_model, tmp_path, capsys):
    data = copy_folder(exported_model.data, tmp_path / "bin")
    (data / "metadata.json").write_text('{"splits": ' + deep_json(DEEP) + "}")
    fails_cleanly(generate_main, "nmt-generate", [data, "--path", exported_model.pair[-1]], 1,
                  (str(data / "metadata.json"), "nested more than"), [data], capsys)
    with open(data / "metadata.json", "wb") as f:  # sparse: 64 MB that take no disk space
        f.truncate(64 << 20)
    fails_cleanly(generate_main, "nmt-generate", [data, "--path", exported_model.pair[-1]], 1,
                  (str(data / "metadata.json"), "67,108,864 bytes, more than a metadata.json holds"), [data], capsys)


def test_nesting_inside_strings_does_not_count(exported_model, tmp_path):
    """Brackets in a string are text: a manifest whose strings hold many is read as before."""
    folder = copy_folder(exported_model.folder, tmp_path / "model")
    manifest = json.loads((folder / "model.json").read_text())
    manifest["exported_from"] = ["[" * 1000 + "\\\"{" * 100]
    (folder / "model.json").write_text(json.dumps(manifest))
    assert nmt.load(folder, threads=1).translate(["a dog ."], beam=1)[0]


# --------------------------------------------------------------------------- item 10: nmt.load's messages

def test_a_file_that_is_not_a_checkpoint_is_never_to_be_deleted(exported_model, tmp_path, capsys):
    passwd = tmp_path / "etc" / "passwd"
    passwd.parent.mkdir()
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n")
    message = nmt_load_error(passwd, data=exported_model.data)
    assert "is not a checkpoint" in message and "delete" not in message and "afresh" not in message
    line = fails_cleanly(generate_main, "nmt-generate", [exported_model.data, "--path", passwd], 1,
                         (str(passwd), "give a checkpoint written by nmt-train"), [passwd.parent], capsys)
    assert "delete" not in line


def test_a_damaged_checkpoint_nmt_train_wrote_may_be_deleted_to_start_afresh(exported_model, tmp_path):
    last = tmp_path / "run" / "checkpoint_last.pt"
    last.parent.mkdir()
    last.write_bytes(exported_model.pair[-1].read_bytes()[:5000])  # a checkpoint cut short
    message = nmt_load_error(last, data=exported_model.data)
    assert "truncated or corrupted" in message and "delete checkpoint_last.pt to start afresh" in message


def test_nmt_load_says_what_a_wrong_path_is(exported_model, tmp_path):
    message = nmt_load_error(exported_model.data)
    assert "is a data-bin (nmt-preprocess), not a model" in message and "needs data=" not in message
    message = nmt_load_error(exported_model.pair[-1].parent)  # a save dir
    assert "is a folder without model.json" in message and "checkpoint_best.pt" in message
    for nothing in (None, "", ":"):
        with pytest.raises(UsageError) as info:
            nmt.load(nothing)
        assert f"path is {nothing!r}" in str(info.value) and "'None'" not in str(info.value)


# --------------------------------------------------------------------------- item 4: the model card is bounded

@pytest.mark.slow
def test_models_route_sends_a_bounded_card_and_never_blocks_on_it(exported_model, tmp_path):
    from nmt.model_folder.card import MAX_CARD_BYTES
    from served_model import Server, http

    folder = copy_folder(exported_model.folder, tmp_path / "model")
    card = folder / "README.md"
    card.write_text("# my model\n" + "é many notes\n" * 100_000)  # 1.4 MB
    server = Server([str(folder), "--threads", "1"])
    try:
        status, body, _ = http(server.base + "/models", timeout=30)
        assert status == 200
        sent = body[0]["card"]
        assert sent.startswith("# my model\n") and len(sent.encode()) < MAX_CARD_BYTES + 200
        assert "model card cut at" in sent and "\ufffd" not in sent
        card.unlink()
        with fifo_at(card):
            status, body, _ = http(server.base + "/models", timeout=30)
        assert status == 200
        assert body[0]["card"] is None
        assert http(server.base + "/health", timeout=30)[0] == 200
    finally:
        assert server.stop() == 0
