"""Checkpoints: plain-type round trip, file names and pruning, crash safety, damaged and hostile files."""

from __future__ import annotations

import os
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from nmt.checkpoint.errors import CheckpointError
from nmt.checkpoint.format import build_state, load_checkpoint, load_model_for_inference, save_checkpoint
from nmt.checkpoint.manager import CheckpointManager, TrainingParts
from nmt.checkpoint.rng_state import get_rng_state, set_rng_state
from nmt.checkpoint.safe_read import previous_good_checkpoint
from nmt.checkpoint.versions import FORMAT_VERSION
from nmt.config.train import CheckpointConfig
from nmt.errors import ConfigError, NmtError, UsageError

torch.set_num_threads(1)


def manager_cfg(save_dir: Path, **kw) -> CheckpointConfig:
    return CheckpointConfig(save_dir=str(save_dir), **kw)


@dataclass
class _ModelCfg:
    dim: int = 4


@dataclass
class _Job:
    model: _ModelCfg = field(default_factory=_ModelCfg)
    common: dict = field(default_factory=lambda: {"seed": 1, "user_dir": None})
    lr: float = 0.01


def tiny_state(epoch: int = 1, num_updates: int = 1, end_of_epoch: bool = False, model=None, **kw) -> dict:
    model = model or torch.nn.Linear(4, 3)
    return build_state(model=model, config=_Job(), epoch=epoch, num_updates=num_updates, end_of_epoch=end_of_epoch,
                       iterator_state={"epoch": epoch, "offset": num_updates}, **kw)


def manager(cfg: CheckpointConfig, **kw) -> CheckpointManager:
    return CheckpointManager(cfg, config=_Job(), **kw)


def save_at(mgr: CheckpointManager, epoch: int, num_updates: int, end_of_epoch: bool = False,
            val_metrics: dict | None = None, model=None) -> list[Path]:
    """What the training loop does after an update: let the manager save whatever is due."""
    return mgr.save(TrainingParts(model or torch.nn.Linear(4, 3)), epoch=epoch, num_updates=num_updates,
                    end_of_epoch=end_of_epoch, val_metrics=val_metrics)


def names_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --------------------------------------------------------------------------- state round trip


def test_rng_state_round_trips_through_a_safe_checkpoint(tmp_path):
    state = get_rng_state()
    save_checkpoint(tmp_path / "c.pt", {"rng": state})
    expected = (random.random(), np.random.rand(), torch.rand(3))
    loaded = torch.load(tmp_path / "c.pt", weights_only=True)
    set_rng_state(loaded["rng"])
    assert random.random() == expected[0]
    assert np.random.rand() == expected[1]
    assert torch.equal(torch.rand(3), expected[2])


def test_each_rank_resumes_with_its_own_random_generators(tmp_path):
    """Several processes: the checkpoint holds every rank's generators and rank r gets back rank r's
    (rank 1's dropout masks go on as if never stopped); a rank past the stored ones gets the writer's."""
    draws = {}
    for seed in (10, 11):
        torch.manual_seed(seed)
        draws[seed] = (get_rng_state(), torch.rand(3))
    parts = TrainingParts(torch.nn.Linear(4, 3))
    torch.manual_seed(10)  # the writer, rank 0, saves its own generators as "rng"
    manager(manager_cfg(tmp_path)).save(parts, epoch=1, num_updates=2, end_of_epoch=False, force_last=True,
                                        rng_ranks=[draws[10][0], draws[11][0]])
    for rank, seed in ((0, 10), (1, 11), (2, 10)):
        torch.manual_seed(99)
        manager(manager_cfg(tmp_path), rank=rank).resume(TrainingParts(torch.nn.Linear(4, 3)))
        assert torch.equal(torch.rand(3), draws[seed][1]), rank


def test_config_is_stored_as_plain_types_and_loads_weights_only(tmp_path):
    state = tiny_state()
    save_checkpoint(tmp_path / "c.pt", state)
    loaded = load_checkpoint(tmp_path / "c.pt")
    assert loaded["config"] == {"model": {"dim": 4}, "common": {"seed": 1, "user_dir": None}, "lr": 0.01}
    assert loaded["model_config"] == {"dim": 4}
    assert type(loaded["config"]) is dict and loaded["format_version"] == FORMAT_VERSION


def test_numpy_values_are_converted_and_objects_refused_at_save_time(tmp_path):
    state = tiny_state(extra={"wall": np.float64(1.5), "sizes": np.arange(3)})
    assert state["training"]["extra"]["wall"] == 1.5 and type(state["training"]["extra"]["wall"]) is float
    assert torch.equal(state["training"]["extra"]["sizes"], torch.arange(3))
    with pytest.raises(CheckpointError, match=r"state\.training\.extra\.bad .*SimpleNamespace"):
        tiny_state(extra={"bad": SimpleNamespace(a=1)})


def test_restore_continues_training_exactly(tmp_path):
    """Save after 3 steps of a dropout model, keep going; a fresh process-like restore gives the same result."""

    def make():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 2))
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return model, opt, sched

    def step(model, opt, sched):
        x = torch.randn(5, 6)
        loss = model(x).pow(2).sum() + random.random() + float(np.random.rand())
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()

    model, opt, sched = make()
    for _ in range(3):
        step(model, opt, sched)
    save_checkpoint(tmp_path / "checkpoint_last.pt",
                    tiny_state(model=model, optimizer=opt, lr_scheduler=sched, num_updates=3))
    for _ in range(4):
        step(model, opt, sched)
    expected = [p.detach().clone() for p in model.parameters()]

    random.seed(99), np.random.seed(99)  # a different process would have other RNG states
    model2, opt2, sched2 = make()
    training = manager(manager_cfg(tmp_path)).resume(TrainingParts(model2, optimizer=opt2, lr_scheduler=sched2))
    assert training["num_updates"] == 3 and training["iterator"] == {"epoch": 1, "offset": 3}
    for _ in range(4):
        step(model2, opt2, sched2)
    for a, b in zip(expected, model2.parameters()):
        assert torch.equal(a, b)


def test_load_model_for_inference(tmp_path):
    model = torch.nn.Linear(4, 3)
    save_checkpoint(tmp_path / "c.pt", tiny_state(model=model, dictionaries={"source": "aa", "target": "bb"}))
    model_cfg, weights, fingerprints = load_model_for_inference(tmp_path / "c.pt")
    assert model_cfg == {"dim": 4}
    assert torch.equal(weights["weight"], model.weight)
    assert fingerprints == {"source": "aa", "target": "bb"}


# --------------------------------------------------------------------------- names, best, pruning


def test_names_links_and_pruning(tmp_path):
    mgr = manager(manager_cfg(tmp_path, save_interval_updates=2, keep_interval_updates=2, keep_last_epochs=1))
    model = torch.nn.Linear(4, 3)
    for epoch in (1, 2):
        for u in range(1, 5):  # the 5th update ends the epoch: an end-of-epoch save
            save_at(mgr, epoch, (epoch - 1) * 5 + u, model=model)
        save_at(mgr, epoch, epoch * 5, True, {"loss": 5.0 - epoch}, model=model)
    assert names_in(tmp_path) == ["checkpoint2.pt", "checkpoint_2_6.pt", "checkpoint_2_8.pt", "checkpoint_best.pt",
                                  "checkpoint_last.pt"]
    last, best, ep2 = (tmp_path / n for n in ("checkpoint_last.pt", "checkpoint_best.pt", "checkpoint2.pt"))
    assert os.path.samefile(last, ep2) and os.path.samefile(best, ep2)  # one write, hard links
    assert load_checkpoint(last)["training"]["best"] == {"metric": "loss", "value": 3.0}


def test_best_survives_resume_and_worse_values_do_not_replace_it(tmp_path):
    cfg = manager_cfg(tmp_path)
    save_at(manager(cfg), 1, 5, True, {"loss": 2.0})
    mgr = manager(cfg)
    mgr.load_for_resume()
    assert mgr.best == 2.0
    assert mgr.names(2, 10, True, {"loss": 2.5}) == ["checkpoint2.pt", "checkpoint_last.pt"]
    assert "checkpoint_best.pt" in mgr.names(2, 10, True, {"loss": 1.5})
    maximize = CheckpointManager(manager_cfg(tmp_path, best_checkpoint_metric="bleu",
                                             maximize_best_checkpoint_metric=True))
    maximize.best = 20.0
    assert maximize.is_better(21.0) and not maximize.is_better(19.0)
    with pytest.raises(ConfigError, match="--best-checkpoint-metric bleu"):
        maximize.names(1, 1, True, {"loss": 1.0})


def test_keep_best_checkpoints(tmp_path):
    mgr = manager(manager_cfg(tmp_path, keep_best_checkpoints=2, no_epoch_checkpoints=True))
    for epoch, loss in enumerate([3.0, 2.0, 2.5, 1.0, 4.0], start=1):
        save_at(mgr, epoch, epoch, True, {"loss": loss})
    assert [n for n in names_in(tmp_path) if n.startswith("checkpoint.best")] == [
        "checkpoint.best_loss_1.0000.pt", "checkpoint.best_loss_2.0000.pt"]


def test_no_save_writes_nothing(tmp_path):
    mgr = manager(manager_cfg(tmp_path / "out", no_save=True, save_interval_updates=1))
    assert save_at(mgr, 1, 1, True, {"loss": 1.0}) == []
    assert not (tmp_path / "out").exists()
    assert mgr.best == 1.0  # the best metric is still tracked (patience, best_loss in the log)


def test_only_the_writer_writes_but_every_rank_tracks_the_best(tmp_path):
    mgr = manager(manager_cfg(tmp_path), writer=False)
    assert save_at(mgr, 1, 5, True, {"loss": 2.0}) == [] and names_in(tmp_path) == []
    assert mgr.best == 2.0


def test_stopping_between_scheduled_saves_writes_only_the_last_checkpoint(tmp_path):
    mgr = manager(manager_cfg(tmp_path, save_interval_updates=10))
    assert save_at(mgr, 1, 3) == []
    assert [p.name for p in mgr.save(TrainingParts(torch.nn.Linear(4, 3)), epoch=1, num_updates=4,
                                     end_of_epoch=False, force_last=True)] == ["checkpoint_last.pt"]
    assert load_checkpoint(tmp_path / "checkpoint_last.pt")["training"]["best"] == {"metric": "loss", "value": None}


def test_resume_path_rules(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert CheckpointManager(manager_cfg(tmp_path / "run")).resume_path() is None  # fresh start
    with pytest.raises(UsageError, match="--restore-file nope.pt"):
        CheckpointManager(manager_cfg(tmp_path / "run", restore_file="nope.pt")).resume_path()
    save_checkpoint(tmp_path / "run" / "checkpoint3.pt", tiny_state())
    assert CheckpointManager(manager_cfg(tmp_path / "run", restore_file="checkpoint3.pt")).resume_path() == \
        tmp_path / "run" / "checkpoint3.pt"


def test_reset_flags_skip_parts(tmp_path):
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    save_checkpoint(tmp_path / "checkpoint_last.pt", tiny_state(model=model, optimizer=opt, extra={"meters": {"a": 1}}))
    opt2 = torch.optim.SGD(model.parameters(), lr=0.1)
    mgr = manager(manager_cfg(tmp_path, reset_optimizer=True, reset_dataloader=True, reset_meters=True))
    training = mgr.resume(TrainingParts(model, optimizer=opt2))
    assert opt2.param_groups[0]["lr"] == 0.1 and training["iterator"] is None and "meters" not in training["extra"]


def test_dictionary_mismatch_is_refused(tmp_path):
    save_checkpoint(tmp_path / "checkpoint_last.pt", tiny_state(dictionaries={"target": "a" * 64}))
    with pytest.raises(CheckpointError, match="another target dictionary"):
        CheckpointManager(manager_cfg(tmp_path), dictionaries={"target": "b" * 64}).load_for_resume()


# --------------------------------------------------------------------------- crash safety


def test_crash_while_writing_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    save_checkpoint([tmp_path / "checkpoint_1_1.pt", tmp_path / "checkpoint_last.pt"], tiny_state(1, 1))
    real_save = torch.save

    def dying_save(obj, f, *a, **kw):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt  # killed mid-write

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint([tmp_path / "checkpoint_1_2.pt", tmp_path / "checkpoint_last.pt"], tiny_state(1, 2))
    monkeypatch.setattr(torch, "save", real_save)
    assert names_in(tmp_path) == ["checkpoint_1_1.pt", "checkpoint_last.pt"]  # no temp file left behind
    assert load_checkpoint(tmp_path / "checkpoint_last.pt")["training"]["num_updates"] == 1


def test_copies_when_hard_links_are_not_supported(tmp_path, monkeypatch):
    def no_link(*a, **kw):
        raise OSError("links not supported")

    monkeypatch.setattr(os, "link", no_link)
    save_checkpoint([tmp_path / "a.pt", tmp_path / "b.pt"], tiny_state())
    assert not os.path.samefile(tmp_path / "a.pt", tmp_path / "b.pt")
    assert names_in(tmp_path) == ["a.pt", "b.pt"]
    assert load_checkpoint(tmp_path / "b.pt")["format_version"] == FORMAT_VERSION


# --------------------------------------------------------------------------- damaged, hostile, foreign files


def _two_checkpoints(folder: Path) -> Path:
    save_checkpoint([folder / "checkpoint_1_1.pt"], tiny_state(1, 1))
    save_checkpoint([folder / "checkpoint_1_2.pt", folder / "checkpoint_last.pt"], tiny_state(1, 2))
    return folder / "checkpoint_last.pt"


def _replace_file(path: Path, data: bytes) -> None:
    path.unlink()  # break the hard link first, as a crashed copy would
    path.write_bytes(data)


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_damaged_last_checkpoint_names_the_previous_good_one(tmp_path, damage):
    last = _two_checkpoints(tmp_path)
    data = bytearray(last.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "empty":
        data = bytearray()
    else:
        data = bytearray(b"not a checkpoint at all" * 10)
    (tmp_path / "checkpoint_1_2.pt").unlink()  # the newest sibling is gone too
    _replace_file(last, bytes(data))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(last)
    message = str(info.value)
    assert "\n" not in message and "truncated or corrupted" in message and str(last) in message
    assert f"--restore-file {tmp_path / 'checkpoint_1_1.pt'}" in message


def test_damaged_hard_linked_sibling_is_not_offered(tmp_path):
    last = _two_checkpoints(tmp_path)
    data = bytearray(last.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with open(last, "r+b") as f:  # damage the shared inode: checkpoint_1_2.pt is damaged as well
        f.write(bytes(data))
    assert previous_good_checkpoint(tmp_path, exclude=[last]) == tmp_path / "checkpoint_1_1.pt"


def test_damaged_without_any_good_checkpoint(tmp_path):
    last = tmp_path / "checkpoint_last.pt"
    last.write_bytes(b"PK\x03\x04")
    with pytest.raises(CheckpointError, match="no other good checkpoint .*delete checkpoint_last.pt"):
        load_checkpoint(last)


class _Hostile:
    def __init__(self, command: str, canary: Path):
        self.command, self.canary = command, canary

    def __reduce__(self):
        if self.command == "system":
            return os.system, (f"touch {self.canary}",)
        return open, (str(self.canary), "w")


@pytest.mark.parametrize("command", ["system", "open"])
def test_pickled_callable_is_refused_and_never_runs(tmp_path, command):
    canary = tmp_path / "canary"
    path = tmp_path / "checkpoint_last.pt"
    state = {"format_version": 1, "model": {}, "payload": _Hostile(command, canary)}
    with open(path, "wb") as f:
        torch.save(state, f)  # written by hand: save_checkpoint itself would refuse the object
    with pytest.raises(CheckpointError, match="refused") as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)
    assert not canary.exists()


def test_plain_pickle_file_is_refused_without_running(tmp_path):
    canary = tmp_path / "canary"
    path = tmp_path / "c.pt"
    path.write_bytes(pickle.dumps(_Hostile("system", canary)))
    with pytest.raises(CheckpointError):
        load_checkpoint(path)
    assert not canary.exists()


def test_newer_format_and_foreign_files_are_refused(tmp_path):
    save_checkpoint(tmp_path / "new.pt", {**tiny_state(), "format_version": FORMAT_VERSION + 1})
    with pytest.raises(CheckpointError, match=f"format version {FORMAT_VERSION + 1}, newer .* upgrade nmt"):
        load_checkpoint(tmp_path / "new.pt")
    torch.save({"args": None, "model": {}}, tmp_path / "fairseq.pt")
    with pytest.raises(CheckpointError, match="not an nmt checkpoint"):
        load_checkpoint(tmp_path / "fairseq.pt")
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint(tmp_path / "missing.pt")


@pytest.mark.slow  # a subprocess: ~5 s on a busy machine
def test_unregistered_plugin_names_it_and_its_user_dir(tmp_path):
    """Save in a process that loaded a --user-dir plugin; load here, where it is not registered."""
    plugins = tmp_path / "my_plugins"
    plugins.mkdir()
    (plugins / "swish_attention.py").write_text(textwrap.dedent("""
        from nmt.models.attention import AttentionBase
        from nmt.registry import register_attention

        @register_attention("ckpt_test_swish")
        class SwishAttention(AttentionBase):
            pass
    """))
    script = textwrap.dedent(f"""
        import torch
        from nmt.plugin_loader import import_user_dir
        from nmt.checkpoint.format import build_state, save_checkpoint
        import_user_dir({str(plugins)!r})
        config = {{"common": {{"user_dir": {str(plugins)!r}}}, "model": {{"attention": "ckpt_test_swish"}}}}
        state = build_state(model=torch.nn.Linear(2, 2), config=config, epoch=1, num_updates=1)
        save_checkpoint({str(tmp_path / 'c.pt')!r}, state)
    """)
    subprocess.run([sys.executable, "-c", script], check=True, cwd=tmp_path)
    record = load_checkpoint(tmp_path / "c.pt", check_plugins_registered=False)["plugins"]
    assert record[0]["kind"] == "attention" and record[0]["name"] == "ckpt_test_swish"
    with pytest.raises(ConfigError) as info:
        load_checkpoint(tmp_path / "c.pt")
    message = str(info.value)
    assert 'attention plugin "ckpt_test_swish"' in message and f"--user-dir {plugins.resolve()}" in message
    assert isinstance(info.value, NmtError) and "\n" not in message


@pytest.mark.slow  # a subprocess: ~5 s on a busy machine
def test_sigkill_during_saves_leaves_a_loadable_last_checkpoint(tmp_path):
    """A process saving big checkpoints in a loop is killed at a random moment: checkpoint_last.pt still loads,
    and the temp file it may leave is removed when the next run starts."""
    script = textwrap.dedent(f"""
        import torch
        from pathlib import Path
        from nmt.checkpoint.format import save_checkpoint
        folder = Path({str(tmp_path)!r})
        for i in range(1, 10_000):
            state = {{"format_version": 1, "i": i, "model": {{"w": torch.full((1_000_000,), float(i))}}}}
            save_checkpoint([folder / f"checkpoint_1_{{i}}.pt", folder / "checkpoint_last.pt"], state)
            (folder / f"checkpoint_1_{{i - 1}}.pt").unlink(missing_ok=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("checkpoint_1_3.pt")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.005)
        time.sleep(random.uniform(0, 0.2))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    state = load_checkpoint(tmp_path / "checkpoint_last.pt", check_plugins_registered=False)
    assert state["i"] >= 2 and torch.equal(state["model"]["w"], torch.full((1_000_000,), float(state["i"])))
    with pytest.raises(CheckpointError, match="no training state"):
        CheckpointManager(manager_cfg(tmp_path)).load_for_resume()  # cleans up first, then refuses this toy state
    assert not list(tmp_path.glob(".*.tmp"))


def test_state_dict_module_versions_are_kept(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2))
    save_checkpoint(tmp_path / "c.pt", tiny_state(model=model))
    loaded = load_checkpoint(tmp_path / "c.pt")["model"]
    assert loaded._metadata == model.state_dict()._metadata  # what load_state_dict uses to upgrade old layouts
