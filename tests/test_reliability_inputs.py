"""Damaged or hostile inputs through the real commands: a data-bin whose .bin/.idx/metadata.json was
damaged (nmt-train, nmt-generate, nmt-validate), BPE codes that are corrupted or point out of the
data-bin, gzip files with a flipped bit, and a training log of binary bytes (nmt-plot). Each case
must end with its exit code and exactly one ``nmt-x: error:`` line naming the file and the fix, no
traceback, no echo of the file's content, and every input file unchanged (checksums)."""

from __future__ import annotations

import gzip
import json
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from nmt.cli.generate import main as generate_main
from nmt.cli.interactive import main as interactive_main
from nmt.cli.plot import main as plot_main
from nmt.cli.prepare import main as prepare_main
from nmt.cli.preprocess import main as preprocess_main
from nmt.cli.train import main as train_main
from nmt.cli.validate import main as validate_main
from nmt.data.dictionary import Dictionary
from nmt.data.indexed_dataset import HEADER
from preprocess_cli_helpers import write_corpus
from reliability_helpers import fails_cleanly
from test_generate_setup import call_cli, make_checkpoint, make_data_bin
from train_toy_data import TINY_MODEL

torch.set_num_threads(1)
SECRET = "TOP-SECRET first line"  # a file outside the data-bin: its content must never be printed
MAINS = {"nmt-train": train_main, "nmt-generate": generate_main, "nmt-validate": validate_main,
         "nmt-interactive": interactive_main, "nmt-preprocess": preprocess_main, "nmt-plot": plot_main,
         "nmt-prepare": prepare_main}


# --------------------------------------------------------------------------- ways to damage a file

def _each(folder: Path, pattern: str, change: Callable[[bytearray], None]) -> None:
    for path in folder.glob(pattern):
        raw = bytearray(path.read_bytes())
        change(raw)
        path.write_bytes(bytes(raw))


def _sizes_shifted(raw: bytearray) -> None:
    """Sentence 0 one token longer, sentence 1 one shorter: the file length and the total still agree."""
    a, b = struct.unpack_from("<ii", raw, HEADER.size)
    struct.pack_into("<ii", raw, HEADER.size, a + 1, b - 1)


def _metadata(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        meta = json.loads((folder / "metadata.json").read_text())
        change(meta)
        (folder / "metadata.json").write_text(json.dumps(meta))
    return apply


def _codes(path_text: str) -> Callable[[Path], None]:
    return _metadata(lambda meta: meta["pipeline"]["bpe"].update(codes={"en": path_text, "de": path_text}))


def _codes_link_out(folder: Path) -> None:
    (folder / "bpe.codes").unlink()
    (folder / "bpe.codes").symlink_to(folder.parent / "secret.txt")


def _bad_codes_line(folder: Path) -> None:
    lines = (folder / "bpe.codes").read_text().splitlines()
    lines[1] = SECRET  # three "subwords"
    (folder / "bpe.codes").write_text("\n".join(lines) + "\n")


DAMAGED_BINS: dict[str, Callable[[Path], None]] = {
    "token-id-out-of-range": lambda f: _each(f, "*.en.bin", lambda raw: raw.__setitem__(0, 0xFF)),
    "sentence-without-eos": lambda f: _each(f, "*.en.bin", lambda raw: raw.__setitem__(-1, 4)),
    "sizes-do-not-match-offsets": lambda f: _each(f, "*.en.idx", _sizes_shifted),
    "metadata-not-json": lambda f: (f / "metadata.json").write_bytes((f / "metadata.json").read_bytes()[:40]),
    "metadata-binary": lambda f: (f / "metadata.json").write_bytes(b"\xff\xfe\x00\x01" * 64),
    "metadata-wrong-type": _metadata(lambda meta: meta.update(pipeline="moses")),
    "metadata-language-is-a-path": _metadata(lambda meta: meta.update(source_lang="../../etc/passwd")),
    "dictionary-binary": lambda f: (f / "dict.en.txt").write_bytes(b"\x89PNG\r\n" + bytes(range(256))),
    "codes-bad-line": _bad_codes_line,
    "codes-not-utf8": lambda f: (f / "bpe.codes").write_bytes(b"#version: 0.2\n\xff\xfe x\n"),
    "codes-bad-version": lambda f: (f / "bpe.codes").write_text("#version: x.y\na b\n"),
    "codes-outside-relative": _codes("../secret.txt"),
    "codes-outside-dotdot-inside": _codes("raw/../../secret.txt"),
    "codes-absolute": lambda f: _codes(str(f.parent / "secret.txt"))(f),
    "codes-link-out": _codes_link_out,
}


def _gz(data: bytes, damage: str) -> bytes:
    raw = bytearray(gzip.compress(data, mtime=0))
    if damage == "bit-flip":
        raw[10] |= 0b110  # the first deflate block's type becomes 3, which does not exist
    elif damage == "checksum":
        raw[-8] ^= 0xFF  # the CRC32 in the trailer
    else:
        raw = raw[: len(raw) // 2]
    return bytes(raw)


# --------------------------------------------------------------------------- the inputs

@pytest.fixture(scope="module")
def w(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("damaged")
    p: dict[str, Path] = {"root": root}
    p["bin"] = make_data_bin(root / "a", n_train=30, n_test=4)
    assert len(Dictionary.load(p["bin"] / "dict.en.txt")) < 255  # uint8 ids: 0xFF is out of range
    p["ckpt"] = make_checkpoint(p["bin"], root / "a.pt")
    (root / "secret.txt").write_text(SECRET + "\nsecond line\n")
    for name, damage in DAMAGED_BINS.items():
        p[name] = root / name / "bin"
        shutil.copytree(p["bin"], p[name], symlinks=True)
        damage(p[name])
    text = "".join(f"line {i}\n" for i in range(3000)).encode()
    for damage in ("bit-flip", "checksum", "truncated"):
        folder = root / f"gz-{damage}"
        folder.mkdir()
        (folder / "train.en.gz").write_bytes(_gz(text, damage))
        (folder / "train.de.gz").write_bytes(gzip.compress(text))
        p[f"gz-{damage}"] = folder
    (root / "input.txt").write_text("a cat\n")
    logs = {"binary": b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8,  # a picture given by mistake
            "not-json": b"hello\n", "huge-line": b"a" * (2 << 20),
            "text-for-number": b'{"kind": "train_inner", "num_updates": 1, "loss": "low"}\n'}
    for name, data in logs.items():
        (root / f"log-{name}").mkdir()
        (root / f"log-{name}" / "train_log.jsonl").write_bytes(data)
        p[f"log-{name}"] = root / f"log-{name}" / "train_log.jsonl"
    return p


@dataclass
class Case:
    id: str
    command: str
    argv: Callable[[dict[str, Path], Path], list[Any]]  # (inputs, a scratch folder for outputs)
    code: int
    needles: tuple[str, ...]


def train(data: str) -> Callable[[dict[str, Path], Path], list[Any]]:
    return lambda w, out: [w[data], *TINY_MODEL, "--num-threads", "1", "--valid-subset", "test", "--max-update", "1",
                           "--max-tokens", "64", "--save-dir", out / "ck"]


def gen(data: str, *extra: Any) -> Callable[[dict[str, Path], Path], list[Any]]:
    return lambda w, out: [w[data], "--path", w["ckpt"], *[e(w) if callable(e) else e for e in extra]]


def validate(data: str) -> Callable[[dict[str, Path], Path], list[Any]]:
    return lambda w, out: [w[data], "--path", w["ckpt"], "--valid-subset", "test"]


def interactive(data: str, input_name: str = "input.txt") -> Callable[[dict[str, Path], Path], list[Any]]:
    return lambda w, out: [w[data], "--path", w["ckpt"], "--input", w["root"] / input_name]


def preprocess(folder: str) -> Callable[[dict[str, Path], Path], list[Any]]:
    return lambda w, out: ["--source-lang", "en", "--target-lang", "de", "--trainpref", w[folder] / "train",
                           "--destdir", out / "bin"]


def plot(log: str) -> Callable[[dict[str, Path], Path], list[Any]]:
    return lambda w, out: [w[log], "--output", out / "curves.png"]


INTEGRITY = {  # damage -> the words of the error line
    "token-id-out-of-range": (".en.bin", "token id 255", "dict.en.txt", "re-run nmt-preprocess"),
    "sentence-without-eos": (".en.bin", "does not end with </s>", "re-run nmt-preprocess"),
    "sizes-do-not-match-offsets": (".en.idx", "sentence 0 does not match its offsets", "re-run nmt-preprocess"),
    "metadata-not-json": ("metadata.json", "not valid JSON", "re-run nmt-preprocess"),
    "metadata-binary": ("metadata.json", "not UTF-8", "re-run nmt-preprocess"),
    "metadata-wrong-type": ("metadata.json", '"pipeline" must be a JSON object', "re-run nmt-preprocess"),
    "metadata-language-is-a-path": ("metadata.json", "must be language names", "re-run nmt-preprocess"),
    "dictionary-binary": ("dict.en.txt, line 1: not UTF-8", "re-run nmt-preprocess"),
}
CODES = {
    "codes-bad-line": ("bpe.codes: line 2 is not a merge", "re-run nmt-preprocess"),
    "codes-not-utf8": ("bpe.codes: not UTF-8", "re-run nmt-preprocess"),
    "codes-bad-version": ("bpe.codes: line 1", "#version"),
    "codes-outside-relative": ("metadata.json", "must be a file inside the data-bin"),
    "codes-outside-dotdot-inside": ("metadata.json", "must be a file inside the data-bin"),
    "codes-absolute": ("metadata.json", "must be a file inside the data-bin"),
    "codes-link-out": ("metadata.json", "must be a file inside the data-bin"),
}
CASES = [
    *[Case(f"{cmd}-{damage}", f"nmt-{cmd}", build(damage), 1, needles)
      for damage, needles in INTEGRITY.items()
      for cmd, build in (("train", train), ("generate", gen), ("validate", validate))],
    *[Case(f"generate-{damage}", "nmt-generate", gen(damage), 1, needles) for damage, needles in CODES.items()],
    Case("interactive-codes-outside-relative", "nmt-interactive", interactive("codes-outside-relative"), 1,
         CODES["codes-outside-relative"]),
    Case("preprocess-gz-bit-flip", "nmt-preprocess", preprocess("gz-bit-flip"), 1,
         ("train.en.gz: the gzip data is damaged near line 1 ", "invalid compressed data")),
    Case("preprocess-gz-checksum", "nmt-preprocess", preprocess("gz-checksum"), 1,
         ("train.en.gz: the gzip data is damaged near line", "checksum")),
    Case("preprocess-gz-truncated", "nmt-preprocess", preprocess("gz-truncated"), 1,
         ("train.en.gz: the gzip data is damaged near line", "truncated")),
    Case("generate-reference-gz-bit-flip", "nmt-generate",
         gen("bin", "--reference", lambda w: w["gz-bit-flip"] / "train.en.gz"), 1,
         ("train.en.gz: the gzip data is damaged near line 1 ",)),
    Case("interactive-input-gz-truncated", "nmt-interactive",
         lambda w, out: [w["bin"], "--path", w["ckpt"], "--input", w["gz-truncated"] / "train.en.gz"], 1,
         ("train.en.gz: the gzip data is damaged", "truncated")),
    Case("prepare-gz-bit-flip", "nmt-prepare",
         lambda w, out: ["multi30k", "--dest", out / "m30k", "--from", w["gz-bit-flip"]], 1,
         ("train.en.gz: the gzip data is damaged near line 1 ",)),
    Case("plot-binary-bytes", "nmt-plot", plot("log-binary"), 1, ("train_log.jsonl:1: not UTF-8",)),
    Case("plot-not-json", "nmt-plot", plot("log-not-json"), 1, ("train_log.jsonl:1: not a JSON line",)),
    Case("plot-huge-line", "nmt-plot", plot("log-huge-line"), 1, ("train_log.jsonl:1: a line longer than 1 MB",)),
    Case("plot-text-for-a-number", "nmt-plot", plot("log-text-for-number"), 1,
         ('train_log.jsonl:1: "loss" is not a number',)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_damaged_input_is_one_line_and_changes_nothing(case, w, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    line = fails_cleanly(MAINS[case.command], case.command, case.argv(w, out), case.code, case.needles,
                         [w["root"], out], capsys)
    assert SECRET not in line and "second line" not in line and "Error: invalid line" not in line
    assert not list(out.iterdir())  # no output, not even a half-written one


def test_codes_without_any_merge_load(tmp_path, capsys):
    """A corpus with no pair to merge used to crash nmt-preprocess (learn_bpe), and codes holding no
    merge could not be loaded (subword-nmt refuses them and exits): both work now."""
    from nmt.data.text_pipeline import load_text_pipeline

    def run(en: list[str], de: list[str], dest: Path) -> None:
        train = write_corpus(tmp_path / f"{dest.name}-raw", "train", en, de)
        argv = ["--source-lang", "en", "--target-lang", "de", "--trainpref", train, "--validpref", train,
                "--destdir", dest, "--bpe", "subword_nmt", "--bpe-merges", "5", "--joined-dictionary"]
        assert call_cli(preprocess_main, argv) == 0, capsys.readouterr().err

    run(["a b", "c"], ["x", "y z"], tmp_path / "letters")  # no word of two characters: nothing to count
    assert (tmp_path / "letters" / "bpe.codes").read_text() == "#version: 0.2\n"
    assert load_text_pipeline(tmp_path / "letters", "en").encode("ab c") == "a@@ b c"
    run(["ab cd", "ef gh"], ["ij kl", "mn op"], tmp_path / "rare")  # every pair seen once < --bpe-min-frequency 2
    assert load_text_pipeline(tmp_path / "rare", "de").encode("ij") == "i@@ j"
