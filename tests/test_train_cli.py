"""`nmt-train` through the real CLI: a toy task is learned, the run stops when told to, and what a
person reads (log lines, JSON log, config.yaml, plugin listing, errors) is there and right."""

from __future__ import annotations

import pytest
import torch

from train_toy_data import TINY_MODEL, call_train, make_toy_task, read_log, run_train

FAST = [*TINY_MODEL, "--max-tokens", "256", "--num-threads", "1", "--dropout", "0"]


@pytest.fixture(scope="module")
def small_bin(tmp_path_factory):
    return make_toy_task(tmp_path_factory.mktemp("small"), n_train=200, n_valid=16)


@pytest.mark.slow
def test_copy_task_reaches_near_zero_loss(tmp_path):
    data = make_toy_task(tmp_path / "copy", n_train=1000, n_valid=64)
    save = tmp_path / "ck"
    run_train([data, *TINY_MODEL, "--num-threads", "1", "--save-dir", save, "--max-tokens", "512", "--lr", "5e-3",
               "--warmup-updates", "20", "--adam-betas", "(0.9,0.98)", "--label-smoothing", "0", "--dropout", "0",
               "--max-update", "300", "--log-interval", "50"])
    valid = read_log(save, "valid")
    assert valid[0]["nll_loss"] > 2.0  # it started from (near) chance
    assert min(v["nll_loss"] for v in valid) < 0.2  # bits per token: it copies nearly perfectly
    assert (save / "checkpoint_best.pt").exists() and (save / "checkpoint_last.pt").exists()


def test_log_lines_json_log_and_config(small_bin, tmp_path, capsys):
    save = tmp_path / "ck"
    run_train([small_bin, *FAST, "--save-dir", save, "--max-epoch", "2", "--log-interval", "2", "--seed", "3"])
    err = capsys.readouterr().err
    inner = read_log(save, "train_inner")
    assert inner and inner[0]["num_updates"] == 2
    for key in ("loss", "nll_loss", "ppl", "wps", "ups", "wpb", "bsz", "lr", "gnorm", "clip", "wall"):
        assert key in inner[0], key
        assert f"{key}=" in err  # the same figures in the fairseq-style line
    assert [r["epoch"] for r in read_log(save, "train")] == [1, 2]
    assert [r["subset"] for r in read_log(save, "valid")] == ["valid", "valid"]
    assert "valid on 'valid' subset" in err
    assert sorted(p.name for p in save.glob("checkpoint*.pt")) == [
        "checkpoint1.pt", "checkpoint2.pt", "checkpoint_best.pt", "checkpoint_last.pt"]
    # config.yaml holds the resolved config and re-runs it
    from nmt.config.loader import resolve_config
    from nmt.config.train import TrainJob

    cfg = resolve_config(TrainJob, yaml_file=save / "config.yaml")
    assert cfg.common.seed == 3 and cfg.optimization.max_epoch == 2 and cfg.model.encoder_layers == 1
    assert cfg.model.encoder_embed_dim == 64  # the --arch preset's value was written out


def test_max_update_stops_inside_an_epoch_and_leaves_a_checkpoint(small_bin, tmp_path):
    save = tmp_path / "ck"
    run_train([small_bin, *FAST, "--save-dir", save, "--max-update", "3", "--log-interval", "1"])
    assert [r["num_updates"] for r in read_log(save, "train_inner")] == [1, 2, 3]
    state = torch.load(save / "checkpoint_last.pt", weights_only=True)
    assert state["training"]["num_updates"] == 3 and not state["training"]["end_of_epoch"]
    assert read_log(save, "valid")  # validated before stopping


def test_stop_time_hours(small_bin, tmp_path, capsys):
    save = tmp_path / "ck"
    run_train([small_bin, *FAST, "--save-dir", save, "--stop-time-hours", "1e-9", "--log-interval", "1"])
    # the limit is checked in each update's vote (every rank stops at the same update), so one update runs
    assert "done training: reached --stop-time-hours 1e-09; 1 updates" in capsys.readouterr().err


def test_patience_stops_when_validation_does_not_improve(small_bin, tmp_path, capsys):
    save = tmp_path / "ck"
    # lr 0: the validation loss never changes, so the 2nd validation is not better than the 1st
    run_train([small_bin, *FAST, "--save-dir", save, "--max-epoch", "10", "--patience", "1",
               "--lr-scheduler", "fixed", "--lr", "0"])
    assert len(read_log(save, "valid")) == 2
    assert "early stop" in capsys.readouterr().err


def test_validate_interval_updates(small_bin, tmp_path):
    save = tmp_path / "ck"
    run_train([small_bin, *FAST, "--save-dir", save, "--max-epoch", "1", "--validate-interval-updates", "2",
               "--log-interval", "100"])
    updates = [r["num_updates"] for r in read_log(save, "valid")]
    per_epoch = read_log(save, "train")[0]["num_updates"]
    assert updates == sorted(set(list(range(2, per_epoch, 2)) + [per_epoch]))


def test_list_plugins_and_arch_help(capsys):
    for argv in (["--list-plugins"], ["--arch", "help"]):
        assert call_train(argv) == 0
        out = capsys.readouterr().out
        for expected in ("arch (--arch):", "transformer_base", "optimizer (--optimizer):", "adam",
                         "lr_scheduler (--lr-scheduler):", "inverse_sqrt", "criterion (--criterion):"):
            assert expected in out


@pytest.mark.parametrize("argv,message", [
    (["--fp16"], "--fp16 needs a CUDA GPU"),
    (["--fp16", "--bf16"], "--fp16 and --bf16 were both given; choose one"),
])
def test_bad_precision_flags_fail_in_one_line(small_bin, tmp_path, capsys, argv, message):
    assert call_train([small_bin, *FAST, "--save-dir", tmp_path / "ck", *argv]) == 2
    err = capsys.readouterr().err
    assert f"nmt-train: error: {message}" in err and "Traceback" not in err


def test_missing_data_bin_is_a_usage_error(tmp_path, capsys):
    assert call_train([tmp_path / "nope", "--save-dir", tmp_path / "ck"]) == 2
    assert "no such folder" in capsys.readouterr().err
