"""Numerical faults in a real `nmt-train`: a NaN/inf loss or gradient stops training in one line
naming the update and the last good checkpoint; under --fp16 an overflow skips the update, lowers
the loss scale and says so. The faults are planted by tests/fault_points.py."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.checkpoint.format import load_checkpoint
from train_toy_data import TINY_MODEL, call_train, make_toy_task

pytestmark = pytest.mark.slow  # nmt-train subprocesses: a few seconds each

FAULT_POINTS = Path(__file__).with_name("fault_points.py")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_toy_task(tmp_path_factory.mktemp("numerical"), n_train=200, n_valid=8)


def train(data: Path, save_dir: Path, fault: str, *extra: str,
          fp16_on_cpu: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NMT_TEST_FAULT": fault}
    if fp16_on_cpu:
        env["NMT_TEST_FP16_ON_CPU"] = "1"
    args = [str(data), "--arch", "transformer_tiny", "--encoder-layers", "1", "--decoder-layers", "1",
            "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
            "--decoder-ffn-embed-dim", "32", "--share-all-embeddings", "--max-tokens", "128", "--max-update", "6",
            "--save-interval-updates", "2", "--disable-validation", "--save-dir", str(save_dir), "--seed", "3",
            "--log-interval", "1", "--no-progress-bar", "--cpu", "--num-threads", "1", *extra]
    return subprocess.run([sys.executable, str(FAULT_POINTS), *args], capture_output=True, text=True, env=env,
                          timeout=240)


@pytest.mark.parametrize("fault,what", [("nan-loss:5", "the training loss is nan"),
                                        ("inf-grad:5", "the gradient norm is inf (fp32)")])
def test_non_finite_loss_or_gradient_stops_with_the_update_and_the_last_good_checkpoint(data, tmp_path, fault, what):
    save_dir = tmp_path / "ckpt"
    done = train(data, save_dir, fault)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith(f"nmt-train: error: update 5: {what}; training diverged"), error
    assert error.endswith(f"the last good checkpoint is {save_dir / 'checkpoint_1_4.pt'}"), error
    good = load_checkpoint(save_dir / "checkpoint_1_4.pt")
    assert good["training"]["num_updates"] == 4
    assert all(bool(t.isfinite().all()) for t in good["model"].values())  # the bad update was never applied
    assert load_checkpoint(save_dir / "checkpoint_last.pt")["training"]["num_updates"] == 4


def test_fp16_overflow_skips_the_update_lowers_the_scale_and_logs_it(data, tmp_path):
    save_dir = tmp_path / "ckpt"
    done = train(data, save_dir, "inf-grad:3", "--fp16", "--fp16-init-scale", "64", fp16_on_cpu=True)
    assert done.returncode == 0, done.stderr[-3000:]
    logged = [line for line in done.stderr.splitlines() if "overflow" in line]
    assert len(logged) == 1 and logged[0].endswith("update 3: fp16 gradient overflow, update skipped; "
                                                   "loss scale now 32"), logged
    final = load_checkpoint(save_dir / "checkpoint_last.pt")["training"]
    assert final["num_updates"] == 6  # the skipped update did not count: 7 tries, 6 updates
    assert math.isclose(final["scaler"]["scaler"]["loss_scale"], 32.0)
    assert all(bool(t.isfinite().all()) for t in load_checkpoint(save_dir / "checkpoint_last.pt")["model"].values())


# --------------------------------------------------------------------------- real divergence, in this process

LOG_RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| (INFO|WARNING) \| ")  # nmt-train's progress log
DIVERGED = re.compile(r"nmt-train: error: update (\d+): the (training loss|validation loss|gradient norm) is "
                      r"(nan|inf|-inf)[^;]*; training diverged\. Lower --lr[^;]*; the last good checkpoint is (\S+)")


def train_in_process(data: Path, save_dir: Path, capsys, *extra: str) -> tuple[int, list[str]]:
    """The real nmt-train CLI in this process: its exit code and its stderr lines that are not log records."""
    args = [data, *TINY_MODEL, "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim",
            "32", "--decoder-ffn-embed-dim", "32", "--max-tokens", "128", "--save-interval-updates", "2",
            "--save-dir", save_dir, "--seed", "3", "--log-interval", "1", "--num-threads", "1", *extra]
    capsys.readouterr()
    code = call_train(args)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-3000:]
    return code, [line for line in err.splitlines() if not LOG_RECORD.match(line)]


def strict_json_lines(path: Path) -> list[dict]:
    """train_log.jsonl read the way strict JSON readers do: NaN / Infinity are refused."""
    def refuse(name: str) -> None:
        raise AssertionError(f"{path}: {name} is not JSON")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def assert_stopped_as_diverged(code: int, lines: list[str], save_dir: Path, what: str) -> int:
    """One documented line, exit 1; the checkpoint it names (and checkpoint_last.pt) load and are finite."""
    assert code == 1 and len(lines) == 1, lines
    found = DIVERGED.fullmatch(lines[0])
    assert found and found.group(2) == what, lines[0]
    update, good = int(found.group(1)), Path(found.group(4))
    state = load_checkpoint(good)
    assert good.parent == save_dir and state["training"]["num_updates"] < update
    assert all(bool(t.isfinite().all()) for t in state["model"].values())
    assert load_checkpoint(save_dir / "checkpoint_last.pt")["training"]["num_updates"] == \
        state["training"]["num_updates"]
    strict_json_lines(save_dir / "train_log.jsonl")
    return update


def test_a_learning_rate_that_diverges_stops_with_the_documented_line(data, tmp_path, capsys):
    """SGD at --lr 1e3 blows the loss up to NaN within a few updates (it used to end in an OverflowError
    from 2**nll_loss while logging); nmt-train stops with the one line and the last good checkpoint."""
    save_dir = tmp_path / "ck"
    code, lines = train_in_process(data, save_dir, capsys, "--optimizer", "sgd", "--lr", "1e3", "--lr-scheduler",
                                   "fixed", "--max-update", "60")
    assert_stopped_as_diverged(code, lines, save_dir, "training loss")
    logged = strict_json_lines(save_dir / "train_log.jsonl")
    assert any(r["ppl"] is None for r in logged), "no update too big for a perplexity: the test lost its point"


def test_a_huge_but_finite_loss_is_logged_without_overflow(data, tmp_path, capsys):
    """The reported command (Adam at a fixed, far too high --lr; reported with 5, here 20, which passes 1,024 bits
    for every seed tried, not only for some): losses of thousands of bits per token, whose 2**nll_loss is past a
    float. The perplexity is inf on the console and null in train_log.jsonl; training goes on."""
    save_dir = tmp_path / "ck"
    code, lines = train_in_process(data, save_dir, capsys, "--lr", "20", "--lr-scheduler", "fixed",
                                   "--max-update", "20")
    assert code == 0 and not lines, lines
    logged = strict_json_lines(save_dir / "train_log.jsonl")
    assert any(r["ppl"] is None and r["nll_loss"] > 1024 for r in logged)
    assert load_checkpoint(save_dir / "checkpoint_last.pt")["training"]["num_updates"] == 20


NAN_IN_VALIDATION = '''
from nmt.plugins.criteria.cross_entropy import CrossEntropy, CrossEntropyConfig
from nmt.registry import register_criterion


@register_criterion("nan_in_validation", config=CrossEntropyConfig)
class NanInValidation(CrossEntropy):
    """Cross-entropy whose validation loss is NaN: a model broken where only validation sees it."""

    def compute(self, logits, target):
        loss, nll = super().compute(logits, target)
        return (loss, nll) if self.training else (loss * float("nan"), nll * float("nan"))
'''


def test_a_nan_validation_loss_stops_with_the_documented_line(data, tmp_path, capsys):
    """It used to end in a TypeError (formatting a best value of None); now it is divergence, found before
    any checkpoint of that update is written or compared as best."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "nan_in_validation.py").write_text(NAN_IN_VALIDATION)
    save_dir = tmp_path / "ck"
    code, lines = train_in_process(data, save_dir, capsys, "--user-dir", plugins, "--criterion", "nan_in_validation",
                                   "--validate-interval-updates", "3", "--max-update", "6")
    assert assert_stopped_as_diverged(code, lines, save_dir, "validation loss") == 3
    assert lines[0].endswith(f"the last good checkpoint is {save_dir / 'checkpoint_1_2.pt'}")
    assert not (save_dir / "checkpoint_best.pt").exists()
