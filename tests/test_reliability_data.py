"""nmt-preprocess and its output folder: it never deletes or replaces a folder it did not create,
an odd --destdir is one clear line, and an interrupted run (SIGTERM, or SIGKILL then a rerun)
leaves nothing behind. Every case runs the real command (in-process or as a process) and checks
the exit code, exactly one ``nmt-preprocess: error:`` line, no traceback, and the checksums of the
inputs and of the user's other files."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from nmt.cli.preprocess import main as preprocess_main
from nmt.data.work_dirs import OWNER_FILE, process_start_time
from preprocess_cli_helpers import DE, EN, base_args, run_subprocess, write_corpus
from reliability_helpers import checksums, fails_cleanly, one_error_line
from shared_paths import MULTI30K
from test_generate_setup import call_cli

PROG = "nmt-preprocess"


@pytest.fixture
def corpus(tmp_path):
    """A folder holding the user's corpus and notes (what must survive every case)."""
    folder = tmp_path / "corpus"
    write_corpus(folder, "train", EN * 4, DE * 4)
    (folder / "notes.txt").write_text("my notes\n")
    return folder


def run_in(folder: Path, *argv: str) -> subprocess.CompletedProcess:
    """nmt-preprocess as a process started in ``folder``, as a user types it there."""
    return run_subprocess(["nmt.cli.preprocess", *argv], cwd=folder)


# --------------------------------------------------------------------------- item 1: --overwrite

@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite"])
def test_destdir_that_is_the_corpus_folder_is_refused(corpus, overwrite):
    """``cd corpus; nmt-preprocess ... --destdir "$PWD" --overwrite`` used to exit 0 and delete the corpus."""
    before = checksums(corpus.parent)
    proc = run_in(corpus, *base_args("train", corpus), *(["--overwrite"] if overwrite else []))
    line = one_error_line(proc.stderr, PROG)
    assert proc.returncode == 2
    assert "not a data-bin" in line and "choose another --destdir" in line
    assert "--overwrite" not in line  # it would not help: such a folder is never replaced
    assert checksums(corpus.parent) == before


def test_overwrite_replaces_a_data_bin_and_says_what_it_removed(corpus, capsys):
    dest = corpus.parent / "bin"
    assert call_cli(preprocess_main, base_args(corpus / "train", dest)) == 0
    before = checksums(corpus)
    capsys.readouterr()
    assert call_cli(preprocess_main, base_args(corpus / "train", dest, "--thresholdsrc", "50", "--overwrite")) == 0
    out = capsys.readouterr().out
    assert f"--overwrite: removed the previous data-bin in {dest} (7 files: dict.de.txt, dict.en.txt," in out
    assert "mat" not in (dest / "dict.en.txt").read_text()  # the new job's dictionary
    assert checksums(corpus) == before
    assert sorted(p.name for p in corpus.parent.iterdir()) == ["bin", "corpus"]  # no temp or old folder


def test_data_bin_holding_other_files_or_an_input_is_not_replaced(corpus, capsys):
    dest = corpus.parent / "bin"
    assert call_cli(preprocess_main, base_args(corpus / "train", dest)) == 0
    (dest / "checkpoint_best.pt").write_bytes(b"weeks of training")
    fails_cleanly(preprocess_main, PROG, base_args(corpus / "train", dest, "--thresholdsrc", "50", "--overwrite"), 2,
                  ("checkpoint_best.pt", "nmt-preprocess did not write", "choose another --destdir"),
                  [corpus.parent], capsys)
    (dest / "checkpoint_best.pt").unlink()
    # its own dictionary given back as an input: replacing the data-bin would delete the input
    fails_cleanly(preprocess_main, PROG, base_args(corpus / "train", dest, "--srcdict", dest / "dict.en.txt",
                                                   "--overwrite"), 2,
                  ("holds the input", "dict.en.txt", "choose another --destdir"), [corpus.parent], capsys)


def test_empty_destdir_is_filled_not_replaced(corpus, monkeypatch, capsys):
    """``--destdir .`` in an empty folder: the data-bin lands in that very folder (a shell inside it
    still sees it), and a failed run leaves it empty."""
    empty = corpus.parent / "empty"
    empty.mkdir()
    inode = empty.stat().st_ino
    monkeypatch.chdir(empty)
    bad = write_corpus(corpus.parent / "bad", "bad", EN, DE[:-1])
    fails_cleanly(preprocess_main, PROG, base_args(bad, Path(".")), 1, ("bad.en has 5 lines",),
                  [corpus.parent], capsys)
    assert call_cli(preprocess_main, base_args(corpus / "train", Path("."))) == 0
    assert empty.stat().st_ino == inode and (empty / "metadata.json").is_file()
    assert not [p for p in corpus.parent.iterdir() if p.name.startswith(".")]


def test_missing_parent_folders_are_removed_when_the_run_fails(corpus, capsys):
    bad = write_corpus(corpus.parent / "bad", "bad", EN, DE[:-1])
    fails_cleanly(preprocess_main, PROG, base_args(bad, corpus.parent / "new" / "deeper" / "bin"), 1,
                  ("bad.en has 5 lines",), [corpus.parent], capsys)
    assert not (corpus.parent / "new").exists()


def _multi30k_copy(folder: Path) -> Path:
    """A tiny stand-in for the Multi30k raw files (plain text), for nmt-prepare --from."""
    for name in ("train", "val", "test_2016_flickr"):
        for lang, lines in (("en", EN), ("de", DE), ("fr", DE)):
            write_corpus(folder, name, lines, lines, langs=(lang, "unused"))
    return folder


def test_prepare_never_replaces_a_file_it_did_not_write(corpus, capsys):
    """The same rule for nmt-prepare: --dest holding the user's own train.en is refused, with or
    without --overwrite; its own files (listed in .prepared.json, even by an interrupted run) are not."""
    from nmt.cli.prepare import main as prepare_main

    source = _multi30k_copy(corpus.parent / "m30k-copy")
    write_corpus(corpus, "train", EN * 4, DE * 4, langs=("en", "fr"))
    for extra in ((), ("--overwrite",)):
        fails_cleanly(prepare_main, "nmt-prepare", ["multi30k", "--dest", corpus, "--from", source, *extra], 2,
                      ("--dest", "train.en, which nmt-prepare did not write", "choose another --dest"),
                      [corpus.parent], capsys)
    dest = corpus.parent / "prepared"
    dest.mkdir()
    (dest / "train.en").write_text("half of an interrupted run\n")
    (dest / ".prepared.json").write_text(json.dumps({"dataset": "multi30k", "complete": False,
                                                      "files": ["train.en"]}))
    assert call_cli(prepare_main, ["multi30k", "--dest", dest, "--from", source]) == 0
    assert (dest / "train.en").read_text().splitlines() == EN


# --------------------------------------------------------------------------- item 18: odd destdirs

ODD_DESTDIRS = {
    # id: (make it, the --destdir, words of the error line)
    "dot-in-the-corpus": (lambda c: None, lambda c: ".", ("not a data-bin", "notes.txt")),
    "empty-string": (lambda c: None, lambda c: "", ("--destdir is empty",)),
    "symlink-loop": (lambda c: (c.parent / "loop").symlink_to(c.parent / "loop"), lambda c: c.parent / "loop",
                     ("symbolic link loop",)),
    "under-a-symlink-loop": (lambda c: (c.parent / "loop").symlink_to(c.parent / "loop"),
                             lambda c: c.parent / "loop" / "bin", ("symbolic link loop",)),
    "an-existing-file": (lambda c: None, lambda c: c / "notes.txt", ("exists and is not a folder",)),
    "under-a-file": (lambda c: None, lambda c: c / "notes.txt" / "bin", ("notes.txt is a file, not a folder",)),
    "the-root-folder": (lambda c: None, lambda c: "/", ("is the root folder",)),
    "under-proc": (lambda c: None, lambda c: "/proc/nmt-no-such-process/bin", ("cannot create",)),
}


@pytest.mark.parametrize("case", list(ODD_DESTDIRS), ids=list(ODD_DESTDIRS))
def test_odd_destdir_is_one_clear_line(case, corpus, monkeypatch, capsys):
    make, destdir, needles = ODD_DESTDIRS[case]
    make(corpus)
    monkeypatch.chdir(corpus)
    line = fails_cleanly(preprocess_main, PROG, base_args(corpus / "train", destdir(corpus)), 2,
                         ("--destdir", *needles), [corpus.parent], capsys)
    assert ".tmp-" not in line and "ValueError" not in line


def _as_another_user() -> tuple[list[str], object]:
    """(nmt-preprocess command, preexec_fn) run by a user without root's right to write anywhere:
    ourselves when not root; else 'nobody', with the system Python of our version (ours may lie in
    root's private home) and our site-packages."""
    if os.geteuid() != 0:
        return [sys.executable, "-m", "nmt.cli.preprocess"], None
    python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    boot = f"import site; site.addsitedir({next(p for p in sys.path if p.endswith('site-packages'))!r})"

    def nobody() -> None:
        os.setgid(65534)
        os.setuid(65534)

    if not Path(python).is_file() or subprocess.run([python, "-c", boot + "; import nmt.cli.preprocess"], cwd="/",
                                                    capture_output=True, timeout=120, preexec_fn=nobody).returncode:
        pytest.skip("running as root and no Python that 'nobody' can run nmt with")
    return [python, "-c", boot + "; from nmt.cli.preprocess import main; main()"], nobody


def test_destdir_without_write_permission(corpus):
    """A folder the user may not write in: refused before anything is made; a finished data-bin there
    (a shared, read-only one) is still found up to date."""
    command, preexec = _as_another_user()
    root = Path(tempfile.mkdtemp(prefix="nmt-perm-"))  # pytest's own tmp folder is closed to other users
    try:
        shutil.copytree(corpus, root / "corpus")
        train = str(root / "corpus" / "train")
        locked = root / "locked"
        assert call_cli(preprocess_main, base_args(train, locked / "shared-bin")) == 0
        for folder in (root, root / "corpus"):
            folder.chmod(0o755)
        for folder in (locked, locked / "shared-bin"):
            folder.chmod(0o555)
        before = checksums(root)
        for args, code, words in ((base_args(train, locked / "bin"), 2, f"no permission to write in {locked}"),
                                  (base_args(train, locked / "shared-bin", "--thresholdsrc", "50", "--overwrite"), 2,
                                   f"no permission to write in {locked}"),
                                  (base_args(train, locked / "shared-bin"), 0, "up to date")):
            proc = subprocess.run([*command, *args], capture_output=True, text=True, timeout=300,
                                  preexec_fn=preexec, cwd=root)
            assert proc.returncode == code, proc.stderr
            assert words in (proc.stdout if code == 0 else one_error_line(proc.stderr, PROG))
            assert checksums(root) == before
    finally:
        shutil.rmtree(root)


def test_destdir_that_is_a_link_to_a_folder_keeps_the_link(corpus, capsys):
    target = corpus.parent / "big-disk" / "bin"
    target.mkdir(parents=True)
    link = corpus.parent / "bin"
    link.symlink_to(target)
    assert call_cli(preprocess_main, base_args(corpus / "train", link)) == 0
    assert link.is_symlink() and (target / "metadata.json").is_file()


# --------------------------------------------------------------------------- item 5: interruptions

def _big_corpus(tmp_path: Path) -> str:
    """A corpus whose Moses pass takes seconds: Multi30k train (read in place), else a synthetic one."""
    if (MULTI30K / "train.en.gz").is_file():
        return str(MULTI30K / "train")
    return write_corpus(tmp_path / "raw", "train", EN * 6000, DE * 6000)


def _start_and_wait_for_the_tokenizer(args: list[str], tmp_path: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "nmt.cli.preprocess", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not list(tmp_path.glob(".bin.tmp-*/.work/*tok*")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)  # the tokenize pass is under way
    assert proc.poll() is None, proc.communicate()
    return proc


@pytest.mark.slow
def test_sigterm_mid_run_removes_its_temp_folder(tmp_path):
    train = _big_corpus(tmp_path)
    inputs = [Path(f"{train}.{lang}{'.gz' if train.startswith(str(MULTI30K)) else ''}") for lang in ("en", "de")]
    before = {p: checksums(p) for p in inputs}
    dest = tmp_path / "bin"
    proc = _start_and_wait_for_the_tokenizer(
        base_args(train, dest, "--tokenizer", "moses", "--workers", "2"), tmp_path)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "nmt-preprocess: interrupted", err
    assert not dest.exists() and not list(tmp_path.glob(".bin.*")), list(tmp_path.iterdir())
    assert {p: checksums(p) for p in inputs} == before


@pytest.mark.slow
def test_sigkill_leftover_is_removed_by_the_next_run_and_nothing_else(tmp_path, capsys):
    train = _big_corpus(tmp_path)
    dest = tmp_path / "bin"
    proc = _start_and_wait_for_the_tokenizer(base_args(train, dest, "--tokenizer", "moses", "--workers", "2"),
                                             tmp_path)
    proc.kill()
    proc.communicate(timeout=60)
    leftover, = tmp_path.glob(".bin.tmp-*")
    assert (leftover / OWNER_FILE).is_file()
    # look-alikes the next run must not touch: no owner file, and a run that is still going on
    (tmp_path / ".bin.tmp-mine").mkdir()
    (tmp_path / ".bin.tmp-mine" / "keep.txt").write_text("not nmt's")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        running = tmp_path / ".bin.tmp-running"
        running.mkdir()
        (running / OWNER_FILE).write_text(json.dumps({"program": "nmt", "pid": alive.pid, "host": socket.gethostname(),
                                                      "start": process_start_time(alive.pid)}))
        kept = checksums(tmp_path / ".bin.tmp-mine", running)
        small = write_corpus(tmp_path / "small", "train", EN, DE)
        capsys.readouterr()
        assert call_cli(preprocess_main, base_args(small, dest)) == 0
        out = capsys.readouterr().out
        assert f"removed {leftover}, left by an interrupted run (process {proc.pid})" in out
        assert not leftover.exists() and (dest / "metadata.json").is_file()
        assert checksums(tmp_path / ".bin.tmp-mine", running) == kept
    finally:
        alive.kill()
        alive.wait()
