"""Bad input to every command, as one table: each case runs the real command in this process and must
end with exit code 2 (usage) or 1 (runtime), exactly one stderr line ``nmt-x: error: ...`` that names
the problem (the needles) and no traceback; ``--debug`` adds the traceback.

Cases already covered elsewhere are not repeated here (docs/reliability-*.md list them all):
tests/test_preprocess_errors.py (missing --trainpref file, line-count mismatch, empty file, bad UTF-8
with file and line, unknown --tokenizer/--bpe, --workers 0, destdir of other data),
tests/test_train_cli.py (missing data-bin), tests/test_average_checkpoints.py (other dictionaries or
architecture, too few checkpoints), tests/test_preprocess_prepare.py (unknown dataset, missing --from)."""

from __future__ import annotations

import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from nmt.cli.average_checkpoints import main as average_main
from nmt.cli.generate import main as generate_main
from nmt.cli.interactive import main as interactive_main
from nmt.cli.prepare import main as prepare_main
from nmt.cli.preprocess import main as preprocess_main
from nmt.cli.train import main as train_main
from preprocess_cli_helpers import DE, EN, write_corpus
from test_generate_setup import call_cli, make_checkpoint, make_data_bin
from train_toy_data import TINY_MODEL

torch.set_num_threads(1)
LONG_TOKENS = 100_000
# nmt-train's progress log ("2026-01-01 12:00:00 | INFO | nmt.train | ...") may precede the error line
LOG_RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| (INFO|WARNING) \| ")

MAINS = {"nmt-preprocess": preprocess_main, "nmt-train": train_main, "nmt-generate": generate_main,
         "nmt-interactive": interactive_main, "nmt-average-checkpoints": average_main, "nmt-prepare": prepare_main}


@pytest.fixture(scope="module")
def w(tmp_path_factory) -> dict[str, Path]:
    """Every input the cases point at: good ones (a data-bin, a checkpoint of it) and broken copies."""
    root = tmp_path_factory.mktemp("validation")
    p: dict[str, Path] = {"root": root}
    p["bin"] = make_data_bin(root / "a", n_train=30, n_test=4)
    p["ckpt"] = make_checkpoint(p["bin"], root / "a.pt")
    other_bin = make_data_bin(root / "b", n_train=30, n_test=4, seed=7)
    p["other_ckpt"] = make_checkpoint(other_bin, root / "other.pt")  # trained with another dictionary
    assert (other_bin / "dict.en.txt").read_text() != (p["bin"] / "dict.en.txt").read_text()

    p["bin_newer"] = root / "bin_newer"  # the .idx header says a newer format version
    shutil.copytree(p["bin"], p["bin_newer"])
    for idx in p["bin_newer"].glob("*.idx"):
        raw = bytearray(idx.read_bytes())
        raw[8:12] = struct.pack("<I", 99)
        idx.write_bytes(bytes(raw))
    p["bin_short"] = root / "bin_short"  # the .bin holds fewer tokens than the .idx sizes promise
    shutil.copytree(p["bin"], p["bin_short"])
    for data in p["bin_short"].glob("*.bin"):
        data.write_bytes(data.read_bytes()[: len(data.read_bytes()) // 2])

    raw = root / "raw"
    p["train"] = Path(write_corpus(raw, "train", EN * 4, DE * 4))
    p["nul"] = Path(write_corpus(raw, "nul", EN[:2] + ["a c\x00t"] + EN[3:], DE))
    long_line = " ".join(f"w{i % 50}" for i in range(LONG_TOKENS))
    p["long"] = Path(write_corpus(raw, "long", [long_line] + EN, [long_line] + DE))

    files = {"input_latin.txt": "größe\n".encode("latin-1"), "input_nul.txt": b"a c\x00t\n",
             "input_long.txt": (long_line + "\n").encode(), "ref_latin.txt": "größe\n".encode("latin-1") * 4,
             "ref_short.txt": b"one line\n", "not_a_checkpoint.pt": b"hello\n",
             "bad_type.yaml": b"common:\n  seed: many\n", "misplaced.yaml": b"seed: 3\n",
             "unknown_key.yaml": b"no_such_key: 1\n",
             "latin.yaml": "seed: größe\n".encode("latin-1")}
    for name, data in files.items():
        (root / name).write_bytes(data)
        p[name] = root / name
    p["empty_from"] = root / "empty_from"
    p["empty_from"].mkdir()
    return p


@dataclass
class Case:
    id: str
    command: str
    argv: Callable[[dict[str, Path]], list[Any]]
    code: int
    needles: tuple[str, ...]


def pre(*extra: Any) -> Callable[[dict[str, Path]], list[Any]]:
    return lambda w: ["--source-lang", "en", "--target-lang", "de", "--trainpref", w["train"],
                      "--destdir", w["root"] / "dest", *[e(w) if callable(e) else e for e in extra]]


def train(*extra: Any, data: str = "bin") -> Callable[[dict[str, Path]], list[Any]]:
    return lambda w: [w[data], *TINY_MODEL, "--num-threads", "1", "--valid-subset", "test", "--max-update", "1",
                      "--max-tokens", "64", "--save-dir", w["root"] / "ck",
                      *[e(w) if callable(e) else e for e in extra]]


def gen(*extra: Any, data: str = "bin", path: str = "ckpt") -> Callable[[dict[str, Path]], list[Any]]:
    return lambda w: [w.get(data, w["root"] / data), "--path", w.get(path, w["root"] / path),
                      *[e(w) if callable(e) else e for e in extra]]


def inter(input_name: str, *extra: Any, path: str = "ckpt") -> Callable[[dict[str, Path]], list[Any]]:
    return lambda w: [w["bin"], "--path", w.get(path, w["root"] / path), "--input",
                      w.get(input_name, w["root"] / input_name), *extra]


def avg(*extra: Any) -> Callable[[dict[str, Path]], list[Any]]:
    return lambda w: ["--output", w["root"] / "avg.pt", *[e(w) if callable(e) else e for e in extra]]


def path(name: str) -> Callable[[dict[str, Path]], Path]:
    return lambda w: w[name] if name in w else w["root"] / name


def config_cases(command: str, base: Callable) -> list[Case]:
    """The config layers' errors: they are shared code, but each command must reach them."""
    short = command.replace("nmt-", "")
    return [
        Case(f"{short}-yaml-wrong-type", command, lambda w: [*base(w), "--config", w["bad_type.yaml"]], 2,
             ("bad_type.yaml", 'bad value for "common.seed"')),
        Case(f"{short}-yaml-unknown-key", command, lambda w: [*base(w), "--config", w["unknown_key.yaml"]], 2,
             ("unknown_key.yaml", 'unknown config key "no_such_key"')),
        Case(f"{short}-yaml-key-in-wrong-section", command, lambda w: [*base(w), "--config", w["misplaced.yaml"]],
             2, ('unknown config key "seed"', 'Did you mean "common.seed"?')),
        Case(f"{short}-override-unknown-key", command, lambda w: [*base(w), "no_such_key=1"], 2,
             ('override "no_such_key=1"', "--help")),
    ]


CASES = [
    # nmt-preprocess (the other preprocess cases live in tests/test_preprocess_errors.py)
    Case("preprocess-wrong-language-suffix", "nmt-preprocess",
         lambda w: ["--source-lang", "fr", "--target-lang", "de", "--trainpref", w["train"], "--destdir",
                    w["root"] / "dest"], 2, ("--trainpref", "train.fr", "--source-lang")),
    Case("preprocess-nul-byte", "nmt-preprocess",
         lambda w: ["--source-lang", "en", "--target-lang", "de", "--trainpref", w["nul"], "--destdir",
                    w["root"] / "dest"], 1, ("nul.en: line 3:", "NUL byte")),
    Case("preprocess-missing-validpref", "nmt-preprocess", pre("--validpref", path("nope")), 2,
         ("--validpref", "nope.en")),
    *config_cases("nmt-preprocess", pre()),
    # nmt-train
    Case("train-wrong-language-suffix", "nmt-train", train("--source-lang", "fr"), 2,
         ("no split 'train' for fr-de", "--source-lang")),
    Case("train-newer-data-format", "nmt-train", train(data="bin_newer"), 1, ("format version 99", ".idx")),
    Case("train-idx-does-not-match-bin", "nmt-train", train(data="bin_short"), 1, (".bin", ".idx", "nmt-preprocess")),
    Case("train-checkpoint-of-other-dictionary", "nmt-train", train("--restore-file", path("other_ckpt")), 1,
         ("other.pt", "another source dictionary", "use the data-bin it was trained on")),
    Case("train-missing-restore-file", "nmt-train", train("--restore-file", path("nope.pt")), 2,
         ("--restore-file", "nope.pt", "no such checkpoint")),
    Case("train-unknown-arch", "nmt-train", train("--arch", "transformer_huge"), 2,
         ('unknown arch "transformer_huge"', "choices:")),
    Case("train-unknown-optimizer", "nmt-train", train("--optimizer", "adamm"), 2,
         ('unknown optimizer "adamm"', 'Did you mean "adam"')),
    Case("train-unknown-criterion", "nmt-train", train("--criterion", "bleu_loss"), 2,
         ('unknown criterion "bleu_loss"', "--user-dir")),
    Case("train-missing-user-dir", "nmt-train", train("--user-dir", path("no_plugins")), 2,
         ("--user-dir", "no_plugins", "no such folder")),
    Case("train-max-tokens-zero", "nmt-train", train("--max-tokens", "0"), 2, ("--max-tokens 0", "must be >= 1")),
    Case("train-max-tokens-negative", "nmt-train", train("--max-tokens", "-5"), 2, ("--max-tokens -5", "must be >= 1")),
    Case("train-flag-value-of-wrong-type", "nmt-train", train("--max-tokens", "many"), 2,
         ("--max-tokens", "'many' is not a valid integer", "--help")),
    Case("train-too-long-pair", "nmt-train", train("--max-tokens", "4000", data="bin_long"), 1,
         ("--max-source-positions", "--skip-invalid-size-inputs-valid-test")),
    Case("train-yaml-not-utf8", "nmt-train", train("--config", path("latin.yaml")), 2,
         ("latin.yaml", "not valid YAML")),
    *config_cases("nmt-train", train()),
    # nmt-generate
    Case("generate-missing-data", "nmt-generate", gen(data="nope"), 2, ("nope", "no such folder")),
    Case("generate-missing-checkpoint", "nmt-generate", gen(path="nope.pt"), 1, ("nope.pt", "no such file")),
    Case("generate-wrong-language-suffix", "nmt-generate", gen("--source-lang", "fr"), 2,
         ("no dict.fr.txt", "--source-lang")),
    Case("generate-newer-data-format", "nmt-generate", gen(data="bin_newer"), 1, ("format version 99", "upgrade")),
    Case("generate-idx-does-not-match-bin", "nmt-generate", gen(data="bin_short"), 1, (".bin", ".idx")),
    Case("generate-checkpoint-of-other-dictionary", "nmt-generate", gen(path="other_ckpt"), 1,
         ("another source dictionary", "use the data-bin it was trained on")),
    Case("generate-not-a-checkpoint", "nmt-generate", gen(path="not_a_checkpoint.pt"), 1,
         ("not_a_checkpoint.pt", "truncated or corrupted")),
    Case("generate-beam-zero", "nmt-generate", gen("--beam", "0"), 2, ("--beam 0", "must be >= 1")),
    Case("generate-max-tokens-zero", "nmt-generate", gen("--max-tokens", "0"), 2, ("--max-tokens 0", "must be >= 1")),
    Case("generate-max-tokens-negative", "nmt-generate", gen("--max-tokens", "-5"), 2,
         ("--max-tokens -5", "must be >= 1")),
    Case("generate-unknown-flag", "nmt-generate", gen("--bem", "3"), 2, ("No such option '--bem'", "'--beam'")),
    Case("generate-unknown-search", "nmt-generate", gen("--search", "bean"), 2, ('unknown search "bean"',)),
    Case("generate-reference-line-count", "nmt-generate", gen("--reference", path("ref_short.txt")), 1,
         ("ref_short.txt: 1 lines", "split test has 4")),
    Case("generate-reference-not-utf8", "nmt-generate", gen("--reference", path("ref_latin.txt")), 1,
         ("ref_latin.txt: line 1:", "not valid UTF-8")),
    *config_cases("nmt-generate", gen()),
    # nmt-interactive
    Case("interactive-input-not-utf8", "nmt-interactive", inter("input_latin.txt"), 1,
         ("input_latin.txt: line 1:", "not valid UTF-8")),
    Case("interactive-input-nul-byte", "nmt-interactive", inter("input_nul.txt"), 1,
         ("input_nul.txt: line 1:", "NUL byte")),
    Case("interactive-input-too-long", "nmt-interactive", inter("input_long.txt"), 1,
         ("input_long.txt: line 1:", "model.max_source_positions", "split the sentence")),
    Case("interactive-missing-checkpoint", "nmt-interactive", inter("input_nul.txt", path="nope.pt"), 1,
         ("nope.pt", "no such file")),
    Case("interactive-checkpoint-of-other-dictionary", "nmt-interactive", inter("input_nul.txt", path="other_ckpt"),
         1, ("another source dictionary",)),
    Case("interactive-beam-zero", "nmt-interactive", inter("input_nul.txt", "--beam", "0"), 2, ("--beam 0",)),
    *config_cases("nmt-interactive", inter("input_nul.txt")),
    # nmt-average-checkpoints
    Case("average-missing-checkpoint", "nmt-average-checkpoints",
         avg("--inputs", lambda w: f"{w['ckpt']}:{w['root'] / 'nope.pt'}"), 1, ("nope.pt", "no such file")),
    Case("average-not-a-checkpoint", "nmt-average-checkpoints",
         avg("--inputs", lambda w: f"{w['ckpt']}:{w['not_a_checkpoint.pt']}"), 1,
         ("not_a_checkpoint.pt", "truncated or corrupted")),
    Case("average-missing-folder", "nmt-average-checkpoints",
         avg("--inputs", path("no_run"), "--num-epoch-checkpoints", "2"), 2, ("--inputs", "no_run", "no such folder")),
    Case("average-zero-checkpoints", "nmt-average-checkpoints",
         avg("--inputs", path("root"), "--num-epoch-checkpoints", "0"), 2, ("--num-epoch-checkpoints 0",)),
    *config_cases("nmt-average-checkpoints", avg("--inputs", path("ckpt"))),
    # nmt-prepare (unknown dataset and a missing --from folder: tests/test_preprocess_prepare.py)
    Case("prepare-from-folder-without-files", "nmt-prepare",
         lambda w: ["multi30k", "--dest", w["root"] / "m30k", "--from", w["empty_from"]], 1,
         ("--from", "empty_from", "train.en")),
    *config_cases("nmt-prepare", lambda w: ["multi30k", "--dest", w["root"] / "m30k", "--from", w["empty_from"]]),
]


@pytest.fixture(scope="module")
def long_bin(w):
    """A data-bin whose training split holds a pair of 100,000 tokens (nmt-preprocess must accept it)."""
    dest = w["root"] / "bin_long"
    w["bin_long"] = dest
    code = call_cli(preprocess_main, ["--source-lang", "en", "--target-lang", "de", "--trainpref", w["long"],
                                      "--testpref", w["train"], "--destdir", dest, "--joined-dictionary"])
    assert code == 0
    return dest


def run_case(case: Case, w: dict[str, Path], capsys, *extra: str) -> tuple[int, str]:
    shutil.rmtree(w["root"] / "ck", ignore_errors=True)  # no case resumes from another's checkpoint
    capsys.readouterr()
    code = call_cli(MAINS[case.command], [*case.argv(w), *extra])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_with_exit_code(case, w, long_bin, capsys):
    code, err = run_case(case, w, capsys)
    lines = [ln for ln in err.strip().splitlines() if not LOG_RECORD.match(ln)]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith(f"{case.command}: error: "), err
    for needle in case.needles:
        assert needle in lines[0], err
    assert code == case.code, err


@pytest.mark.parametrize("case_id", ["generate-beam-zero", "train-newer-data-format"])
def test_debug_adds_the_traceback(case_id, w, long_bin, capsys):
    case = next(c for c in CASES if c.id == case_id)
    code, err = run_case(case, w, capsys, "--debug")
    assert code == case.code
    assert "Traceback (most recent call last)" in err
    assert err.strip().splitlines()[-1].startswith(f"{case.command}: error: ")


def test_a_100k_token_line_is_binarized_and_skipped_when_asked(w, long_bin, capsys):
    """nmt-preprocess keeps a very long line (length is a training decision); nmt-train refuses it
    (see the table) unless --skip-invalid-size-inputs-valid-test, which skips it with a warning."""
    from nmt.data.language_pair_dataset import load_language_pair

    data = load_language_pair(long_bin, "train", "en", "de")
    assert int(data.src_sizes.max()) == LONG_TOKENS + 1  # every token, and the eos
    capsys.readouterr()
    code = call_cli(train_main, [*train("--max-tokens", "4000", "--skip-invalid-size-inputs-valid-test",
                                        data="bin_long")(w), "--save-dir", w["root"] / "ck_long"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "skip" in err.lower() and "Traceback" not in err
