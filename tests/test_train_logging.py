"""What the training log shows: fairseq-style figures from summed meters, JSON lines, TensorBoard
scalars (through a stand-in writer), and nothing at all from ranks other than 0."""

from __future__ import annotations

import json
import math

import pytest

from nmt.config.train import LoggingConfig
from nmt.training import train_log
from nmt.training.criterion import build_criterion
from nmt.training.metrics import UpdateMeter, ValidMeter, format_value
from nmt.training.train_log import TrainLog


def _update(loss_nats_per_token: float, ntokens: int, nsentences: int, **extra):
    return {"loss": loss_nats_per_token * ntokens, "nll_loss": loss_nats_per_token * ntokens, "ntokens": ntokens,
            "nsentences": nsentences, "sample_size": ntokens, "gnorm": 1.0, "lr": 1e-4, **extra}


def test_interval_figures_are_token_weighted():
    meter = UpdateMeter(build_criterion({"name": "cross_entropy"}, 1))
    meter.add(_update(1.0, 100, 10), seconds=1.0)
    meter.add(_update(3.0, 300, 30, clipped=True), seconds=1.0)
    out = meter.summary(num_updates=2, wall=5.0)
    assert out["loss"] == pytest.approx(2.5 / math.log(2))  # (100*1 + 300*3) / 400 nats, in bits
    assert out["ppl"] == pytest.approx(2 ** out["nll_loss"])
    assert out["wps"] == pytest.approx(200.0) and out["ups"] == pytest.approx(1.0)
    assert out["wpb"] == 200 and out["bsz"] == 20 and out["clip"] == 50.0
    assert "loss_scale" not in out  # only fp16 shows it
    meter.reset()
    assert meter.updates == 0 and meter.sums["ntokens"] == 0


def test_valid_meter_reports_per_batch_sizes():
    meter = ValidMeter(build_criterion({"name": "cross_entropy"}, 1))
    for n in (100, 300):
        meter.add(_update(2.0, n, n // 10))
    out = meter.summary(num_updates=7)
    assert out["loss"] == pytest.approx(2.0 / math.log(2)) and out["wpb"] == 200 and out["bsz"] == 20


def test_format_values_like_fairseq():
    assert format_value("wps", 2390.6) == "2391"
    assert format_value("loss", 4.76912) == "4.769"
    assert format_value("lr", 0.000125) == "0.000125"
    assert format_value("ppl", 9.2811) == "9.28"


class FakeWriter:
    def __init__(self):
        self.scalars = []

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, value, step))

    def flush(self):
        pass

    def close(self):
        pass


def test_json_lines_console_and_tensorboard(tmp_path, monkeypatch, caplog):
    writer = FakeWriter()
    monkeypatch.setattr(train_log, "_tensorboard_writer", lambda logdir: writer if logdir else None)
    log = TrainLog(LoggingConfig(tensorboard_logdir=str(tmp_path / "tb")), str(tmp_path), is_master=True,
                   no_progress_bar=True)
    assert log.progress_bar is False
    with caplog.at_level("INFO", logger="nmt.train"):
        log.emit("train_inner", 3, {"loss": 4.5, "wps": 1234.4, "num_updates": 20}, progress="    5 / 10")
        log.emit("valid", 3, {"loss": 4.0, "num_updates": 20}, subset="valid")
    lines = [json.loads(x) for x in (tmp_path / train_log.JSON_LOG).read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["train_inner", "valid"]
    assert lines[0]["epoch"] == 3 and lines[0]["loss"] == 4.5 and lines[1]["subset"] == "valid"
    text = caplog.text
    assert "epoch 003:     5 / 10 loss=4.500, wps=1234, num_updates=20" in text
    assert "epoch 003 | valid on 'valid' subset | loss 4.000 | num_updates 20" in text
    assert ("train_inner/loss", 4.5, 20) in writer.scalars and ("valid/loss", 4.0, 20) in writer.scalars


def test_other_ranks_write_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(train_log, "_tensorboard_writer", lambda logdir: pytest.fail("rank 1 made a writer"))
    log = TrainLog(LoggingConfig(tensorboard_logdir=str(tmp_path / "tb")), str(tmp_path), is_master=False,
                   no_progress_bar=False)
    log.emit("train", 1, {"loss": 1.0})
    assert not (tmp_path / train_log.JSON_LOG).exists()
    assert log.progress_bar is False


def _strict_json(line: str) -> dict:
    """json.loads refusing NaN/Infinity, as strict readers (jq, JavaScript) do."""
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(line, parse_constant=refuse)


def test_non_finite_figures_are_written_as_null(tmp_path):
    log = TrainLog(LoggingConfig(), str(tmp_path), is_master=True, no_progress_bar=True)
    log.emit("train_inner", 1, {"loss": 1500.0, "ppl": math.inf, "gnorm": math.nan, "num_updates": 2})
    record = _strict_json((tmp_path / train_log.JSON_LOG).read_text())
    assert record["loss"] == 1500.0 and record["ppl"] is None and record["gnorm"] is None


@pytest.mark.parametrize("text,kept", [
    (b"", b""),
    (b'{"a": 1}\n{"b": 2}\n', b'{"a": 1}\n{"b": 2}\n'),
    (b'{"a": 1}\n{"b": ', b'{"a": 1}\n'),
    (b'{"b": ', b""),
    (b'{"a": 1}\n' + b"x" * 10_000, b'{"a": 1}\n'),  # a cut-off line longer than the 4 KB read back
])
def test_drop_partial_last_line(tmp_path, text, kept):
    path = tmp_path / "log.jsonl"
    path.write_bytes(text)
    assert train_log.drop_partial_last_line(path) == len(text) - len(kept)
    assert path.read_bytes() == kept
    assert train_log.drop_partial_last_line(tmp_path / "missing.jsonl") == 0


def test_a_line_cut_off_by_a_kill_is_dropped_by_the_next_run(tmp_path, capsys):
    """nmt-train killed during an append leaves half a line; the resumed run drops it (saying so in one
    log line) instead of appending onto it, and nmt-plot then reads every line."""
    from nmt.cli.plot import main as plot_main
    from train_toy_data import TINY_MODEL, make_toy_task, read_log, run_train

    data = make_toy_task(tmp_path / "toy", n_train=100, n_valid=8)
    save = tmp_path / "ck"
    argv = [data, *TINY_MODEL, "--max-tokens", "256", "--num-threads", "1", "--save-dir", save, "--log-interval", "1"]
    run_train([*argv, "--max-update", "3"])
    path = save / train_log.JSON_LOG
    whole = path.read_bytes()
    partial = b'{"kind": "train_inner", "epoch": 1, "loss": 5.1'
    path.write_bytes(whole + partial)
    capsys.readouterr()
    run_train([*argv, "--max-update", "5"])
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "dropped" in line]
    assert len(said) == 1 and said[0].endswith(f"WARNING | nmt.train | {path}: dropped its last line "
                                               f"({len(partial)} bytes), cut off by an interrupted run"), err
    text = path.read_text()
    assert text.startswith(whole.decode()) and text.endswith("\n")
    assert [_strict_json(line)["num_updates"] for line in text.splitlines()
            if '"train_inner"' in line] == [1, 2, 3, 4, 5]
    assert [r["num_updates"] for r in read_log(save, "train_inner")] == [1, 2, 3, 4, 5]
    try:
        plot_main([str(save), "--output", str(tmp_path / "curves.png")])
    except SystemExit as e:
        assert e.code in (0, None)
    assert "warning" not in capsys.readouterr().err


def test_figures_of_a_diverging_run_format_without_errors():
    meter = UpdateMeter(build_criterion({"name": "cross_entropy"}, 1))
    meter.add(_update(2000.0, 10, 1), seconds=1.0)  # 2**2885 bits: past a float
    out = meter.summary(num_updates=1, wall=1.0)
    assert out["ppl"] == math.inf and format_value("ppl", out["ppl"]) == "inf"
    assert format_value("best_loss", None) == "-"
