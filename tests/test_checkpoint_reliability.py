"""Checkpoint misuse through the real commands (issue "Reliability, round 2"): each case ends with its
exit code, exactly one ``nmt-x: error:`` line that says what is wrong and the fix, no traceback, and
every input file byte for byte as it was.

- an ``--output`` of nmt-average-checkpoints that is one of its inputs (same path, hard or symbolic link);
- an averaged checkpoint put where nmt-train resumes from (no optimizer, scheduler or data position);
- resuming with other model options in the same --save-dir, and a tensor of the wrong shape;
- a stored config edited to ask for gigabytes (nmt-generate, nmt-validate, nmt-import-fairseq), run
  under an address-space limit so that an allocation would fail instead of swapping;
- a --save-dir that is a file; a pickle calling ``eval``, refused without torch's allow-listing advice.
"""

from __future__ import annotations

import hashlib
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nmt.checkpoint.errors import CheckpointError
from nmt.checkpoint.format import load_checkpoint, save_checkpoint
from nmt.checkpoint.save_dir import LOCK_NAME
from nmt.cli.average_checkpoints import main as average_main
from nmt.cli.generate import main as generate_main
from nmt.cli.validate import main as validate_main
from test_generate_setup import call_cli
from train_toy_data import TINY_MODEL, call_train, make_toy_task

torch.set_num_threads(1)
TRAIN = [*TINY_MODEL, "--max-tokens", "128", "--num-threads", "1", "--dropout", "0", "--seed", "3",
         "--cpu", "--log-interval", "100"]
MEMORY_LIMIT = 2 << 30  # address space for the subprocess cases: enough for nmt, far from the GBs asked for


def sha256s(*paths: Path) -> dict[Path, str]:
    """Checksums of every file under ``paths``."""
    files = [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*"))) if f.is_file()]
    return {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def assert_unchanged(before: dict[Path, str], *paths: Path) -> None:
    """Every file of ``before`` holds the same bytes; the only new file may be the --save-dir lock."""
    after = sha256s(*paths)
    assert {p: after.get(p) for p in before} == before
    assert {p.name for p in after if p not in before} <= {LOCK_NAME}


def one_error(prog: str, code: int, err: str, expected_code: int, *needles: str) -> str:
    """The single error line of a failed command, after checking the contract around it."""
    assert code == expected_code, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith(f"{prog}: error: "), err[-3000:]
    for needle in needles:
        assert needle in errors[0], f"{needle!r} not in {errors[0]!r}"
    return errors[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict[str, Path]:
    """A toy data-bin and a 2-epoch nmt-train run of it (checkpoint1.pt, checkpoint2.pt, _last, _best)."""
    root = tmp_path_factory.mktemp("ckrel")
    data = make_toy_task(root / "toy", n_train=60, n_valid=8)
    save = root / "run"
    assert call_train([data, *TRAIN, "--save-dir", save, "--max-epoch", "2"]) == 0
    return {"root": root, "data": data, "save": save}


def cli(main, capsys, *argv) -> tuple[int, str, str]:
    code = call_cli(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- item 2: averaging


@pytest.mark.parametrize("how", ["same-path", "relative-path", "hard-link", "symlink"])
def test_average_refuses_an_output_that_is_an_input(run, tmp_path, capsys, monkeypatch, how):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    a.write_bytes((run["save"] / "checkpoint1.pt").read_bytes())
    b.write_bytes((run["save"] / "checkpoint2.pt").read_bytes())
    output = {"same-path": a, "relative-path": Path("a.pt"), "hard-link": tmp_path / "hard.pt",
              "symlink": tmp_path / "sym.pt"}[how]
    if how == "hard-link":
        os.link(b, output)
    elif how == "symlink":
        output.symlink_to(a)
    monkeypatch.chdir(tmp_path)
    before = sha256s(tmp_path)
    code, _, err = cli(average_main, capsys, "--inputs", f"{a}:{b}", "--output", output)
    one_error("nmt-average-checkpoints", code, err, 2, f"--output {output}", "one of the --inputs",
              "give a new file name")
    assert sha256s(tmp_path) == before


def test_an_averaged_checkpoint_is_not_resumed_as_if_it_were_a_run(run, tmp_path, capsys):
    save = tmp_path / "run"
    save.mkdir()
    for name in ("checkpoint1.pt", "checkpoint2.pt"):
        (save / name).write_bytes((run["save"] / name).read_bytes())
    code, _, err = cli(average_main, capsys, "--inputs", save, "--num-epoch-checkpoints", "2",
                       "--output", save / "checkpoint_last.pt")
    assert code == 0, err  # a new file: allowed, and now it is what nmt-train resumes from
    before = sha256s(save, run["data"])
    code = call_train([run["data"], *TRAIN, "--save-dir", save, "--max-epoch", "3"])
    one_error("nmt-train", code, capsys.readouterr().err, 1, f"checkpoint {save / 'checkpoint_last.pt'}",
              "no optimizer, LR scheduler, data position state", "averaged", "resume from a checkpoint nmt-train wrote",
              "--reset-optimizer --reset-lr-scheduler --reset-dataloader")
    assert_unchanged(before, save, run["data"])
    # asked for explicitly, training starts from the averaged weights
    assert call_train([run["data"], *TRAIN, "--save-dir", save, "--max-update", "1", "--reset-optimizer",
                       "--reset-lr-scheduler", "--reset-dataloader"]) == 0
    assert "resumed from" in capsys.readouterr().err


# --------------------------------------------------------------------------- item 11: another model


def test_resuming_with_another_model_is_one_line(run, tmp_path, capsys):
    save = tmp_path / "run"
    save.mkdir()
    (save / "checkpoint_last.pt").write_bytes((run["save"] / "checkpoint_last.pt").read_bytes())
    before = sha256s(save, run["data"])
    code = call_train([run["data"], *TRAIN, "--save-dir", save, "--max-epoch", "3", "--decoder-layers", "2",
                       "--encoder-ffn-embed-dim", "96"])
    one_error("nmt-train", code, capsys.readouterr().err, 1, f"checkpoint {save / 'checkpoint_last.pt'}",
              "holds another model than these options build: parameter encoder.layers.0.ffn.fc1.weight is "
              "(256, 64) in the checkpoint but (96, 64) in the model; 20 parameters of the model are missing",
              "model options of the run that wrote it", "another --save-dir", "--reset-* options do not help")
    assert_unchanged(before, save, run["data"])


@pytest.mark.parametrize("command", ["nmt-generate", "nmt-validate"])
def test_a_tensor_of_the_wrong_shape_is_one_line(run, tmp_path, capsys, command):
    state = load_checkpoint(run["save"] / "checkpoint_best.pt")
    name = "encoder.layers.0.ffn.fc1.weight"
    state["model"][name] = torch.zeros(3, *state["model"][name].shape[1:])
    path = save_checkpoint(tmp_path / "damaged.pt", state)[0]
    before = sha256s(path, run["data"])
    main = {"nmt-generate": generate_main, "nmt-validate": validate_main}[command]
    code, _, err = cli(main, capsys, run["data"], "--path", path, *(["--gen-subset", "valid"] if
                                                                     command == "nmt-generate" else []))
    one_error(command, code, err, 1, f"checkpoint {path}", f"parameter {name} is (3, 64) in the checkpoint",
              "(256, 64) in the model", "damaged or its config was edited")
    assert sha256s(path, run["data"]) == before


# --------------------------------------------------------------------------- item 8: absurd configs

EDITS = {
    "embed-dim-65536": {"encoder_embed_dim": 65536, "decoder_embed_dim": 65536},
    "a-billion-layers": {"encoder_layers": 10**9},
    "a-thousand-layers": {"encoder_layers": 1000},
    "a-billion-positions": {"max_source_positions": 10**9, "positional": "sinusoidal", "encoder_positional": None},
}
NEEDLES = {
    "embed-dim-65536": ["does not match its tensors", "is (24, 64) in the checkpoint but (24, 65536) in the model"],
    # beyond the declared ranges: refused as the file's fault before any tensor is compared
    "a-billion-layers": ["its stored model config is not valid", "--encoder-layers 1000000000: must be in [1, 1000]"],
    "a-billion-positions": ["its stored model config is not valid", "--max-source-positions 1000000000"],
    # within them: the layer count is checked against the tensors' names before building anything
    "a-thousand-layers": ["asks for 1000 encoder layers (encoder_layers) but its tensors hold 1"],
}


def _limited(argv: list[str]) -> subprocess.CompletedProcess:
    """``argv`` in a fresh process that may not map more than MEMORY_LIMIT bytes."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    return subprocess.run(argv, capture_output=True, text=True, preexec_fn=limit, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def _command(module: str, *argv: object) -> list[str]:
    return [sys.executable, "-c", f"from nmt.cli.{module} import main; main()", *map(str, argv)]


@pytest.mark.slow  # fresh processes
@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edited_config_is_refused_before_anything_is_allocated(run, tmp_path, edit):
    state = load_checkpoint(run["save"] / "checkpoint_best.pt")
    state["model_config"] = {**state["model_config"], **EDITS[edit]}
    path = save_checkpoint(tmp_path / f"{edit}.pt", state)[0]
    assert path.stat().st_size < 2 << 20  # a small file asking for gigabytes
    before = sha256s(path, run["data"])
    for prog, module, extra in (("nmt-generate", "generate", ["--gen-subset", "valid"]),
                                ("nmt-validate", "validate", [])):
        done = _limited(_command(module, run["data"], "--path", path, *extra))
        one_error(prog, done.returncode, done.stderr, 1, f"checkpoint {path}", "model config", *NEEDLES[edit])
    assert sha256s(path, run["data"]) == before


FAIRSEQ_EDITS = {
    "dims-65536": ({"encoder_embed_dim": 65536, "decoder_embed_dim": 65536, "decoder_input_dim": 65536,
                    "decoder_output_dim": 65536, "encoder_ffn_embed_dim": 65536}, "does not match its tensors"),
    "a-million-layers": ({"encoder_layers": 10**6}, "--encoder-layers 1000000: must be in [1, 1000]"),
    "a-thousand-layers": ({"encoder_layers": 1000}, "asks for 1000 encoder layers"),
    "a-billion-positions": ({"max_source_positions": 10**9}, "--max-source-positions 1000000000: must be in"),
}


@pytest.mark.slow  # fresh processes
@pytest.mark.parametrize("edit", list(FAIRSEQ_EDITS))
def test_import_fairseq_checks_args_against_tensors_before_allocating(tmp_path, edit):
    from test_import_fairseq import data_dir, tiny_args, tiny_weights

    changes, needle = FAIRSEQ_EDITS[edit]
    path = tmp_path / "fairseq.pt"
    weights = tiny_weights(tiny_args(encoder_layers=1, decoder_layers=1))
    torch.save({"args": tiny_args(**{"encoder_layers": 1, "decoder_layers": 1, **changes}), "model": weights}, path)
    data = data_dir(tmp_path)
    before = sha256s(path, data)
    done = _limited(_command("import_fairseq", "checkpoint", "--path", path, "--data", data,
                             "--output", tmp_path / "out.pt"))
    one_error("nmt-import-fairseq checkpoint", done.returncode, done.stderr, 1, f"fairseq checkpoint {path}", "args",
              needle, "fairseq-train wrote it")
    assert sha256s(path, data) == before and not (tmp_path / "out.pt").exists()


def test_a_tiny_fairseq_file_asking_for_gigabytes_is_refused_in_process(tmp_path):
    """The shape of the reported file (1.6 KB): big sizes in the args and almost no weights."""
    from nmt.data.dictionary import Dictionary
    from nmt.interop.fairseq_checkpoint import build_imported_model
    from test_import_fairseq import V, tiny_args

    d = Dictionary()
    for i in range(V - 4):
        d.add_symbol(f"w{i}", V - i)
    args = tiny_args(encoder_embed_dim=32768, decoder_embed_dim=32768, decoder_input_dim=32768,
                     decoder_output_dim=32768, encoder_ffn_embed_dim=32768, decoder_ffn_embed_dim=32768,
                     encoder_layers=6, decoder_layers=6)
    state = {"args": args, "model": {"encoder.embed_tokens.weight": torch.zeros(V, 1)}}
    with pytest.raises(CheckpointError, match="asks for 6 encoder layers .* its tensors hold 0"):
        build_imported_model(state, tmp_path / "fs.pt", d, d)


# --------------------------------------------------------------------------- item 18: save dir, hostile pickle


@pytest.mark.parametrize("where", ["the-file", "below-the-file"])
def test_a_save_dir_that_is_a_file_is_one_line(run, tmp_path, capsys, where):
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    save = afile if where == "the-file" else afile / "run"
    before = sha256s(afile, run["data"])
    code = call_train([run["data"], *TRAIN, "--save-dir", save, "--max-update", "1"])
    one_error("nmt-train", code, capsys.readouterr().err, 2, f"--save-dir {save}", f"{afile} is a file",
              "pass a folder path")
    assert_unchanged(before, afile, run["data"])


class _Eval:
    def __init__(self, canary: Path):
        self.canary = canary

    def __reduce__(self):
        return eval, (f"open({str(self.canary)!r}, 'w').close()",)


TORCH_ADVICE = ("add_safe_globals", "safe_globals", "weights_only", "allowlist", "eval", "trust")


def test_a_pickle_calling_eval_is_refused_without_torch_advice(run, tmp_path, capsys):
    canary = tmp_path / "canary"
    path = tmp_path / "checkpoint_last.pt"
    with open(path, "wb") as f:
        torch.save({"format_version": 2, "model": {}, "payload": _Eval(canary)}, f)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "\n" not in message and f"checkpoint {path} is refused" in message and "could run code" in message
    assert not [word for word in TORCH_ADVICE if word in message.replace(str(path), "").lower()], message
    before = sha256s(path, run["data"])
    code, _, err = cli(generate_main, capsys, run["data"], "--path", path, "--gen-subset", "valid")
    line = one_error("nmt-generate", code, err, 1, f"checkpoint {path} is refused")
    assert not [word for word in TORCH_ADVICE if word in line.replace(str(path), "").lower()], line
    assert not canary.exists() and sha256s(path, run["data"]) == before
