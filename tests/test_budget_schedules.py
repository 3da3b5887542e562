"""Schedules that follow the training budget (linear, wsd, cosine_budget), the progress they read, checkpoints at
shares of the budget (--save-at-progress), and the moving average of the weights (--ema-decay): values at known
points, the clock that leaves validation out, a run interrupted and resumed that repeats the uninterrupted one
(learning rates, weights, average), and the one-line refusals."""

from __future__ import annotations

import math

import pytest
import torch

from nmt.checkpoint.format import load_checkpoint
from nmt.training import budget as budget_module
from nmt.training.budget import Budget, TrainingClock, parse_progress_points
from nmt.training.ema import WeightAverage
from nmt.training.lr_scheduler import build_lr_scheduler
from train_toy_data import TINY_MODEL, call_train, make_toy_task, read_log, run_train

FAST = [*TINY_MODEL, "--max-tokens", "256", "--num-threads", "1", "--dropout", "0"]


def schedule(group, lr=1e-3, max_update=0):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=123.0)
    return build_lr_scheduler(group, optimizer, lr, max_update=max_update)


def walk(s, points):
    """The learning rate after each (updates, progress), stepped in order as training steps them."""
    return [s.step_update(n, p) for n, p in points]


@pytest.fixture(scope="module")
def small_bin(tmp_path_factory):
    return make_toy_task(tmp_path_factory.mktemp("budget"), n_train=200, n_valid=16)


# ---------------------------------------------------------------------------------------------- the schedules


def test_linear_warms_up_then_falls_to_zero_over_the_rest_of_the_budget():
    s = schedule({"name": "linear", "warmup_updates": 10})
    # the warmup ends at update 10, at progress 0.2: the line runs from --lr there to 0 at progress 1
    assert walk(s, [(5, 0.1), (10, 0.2), (20, 0.6), (30, 1.0)]) == pytest.approx([5e-4, 1e-3, 5e-4, 0.0])
    assert s.step_update(31, 1.3) == 0.0  # past the budget (a clock read late): stays at 0


def test_cosine_budget_is_a_half_cosine_after_the_warmup():
    s = schedule({"name": "cosine_budget", "warmup_updates": 4})
    lrs = walk(s, [(2, 0.05), (4, 0.1), (8, 0.325), (9, 0.55), (12, 1.0)])
    assert lrs == pytest.approx([5e-4, 1e-3, 1e-3 * (1 + math.cos(math.pi / 4)) / 2, 5e-4, 0.0])


def test_wsd_holds_the_rate_then_cools_down_as_one_minus_sqrt():
    s = schedule({"name": "wsd", "warmup_updates": 4, "cooldown_fraction": 0.2})
    lrs = walk(s, [(2, 0.02), (4, 0.04), (50, 0.5), (80, 0.8), (85, 0.85), (95, 0.95), (100, 1.0)])
    assert lrs == pytest.approx([5e-4, 1e-3, 1e-3, 1e-3, 1e-3 * (1 - math.sqrt(0.25)),
                                 1e-3 * (1 - math.sqrt(0.75)), 0.0])


def test_an_update_budget_gives_the_decay_of_the_update_count():
    """With --max-update alone the progress is updates / max-update: linear is then fairseq's polynomial decay
    with power 1 from the warmup's end to max-update."""
    s = schedule({"name": "linear", "warmup_updates": 100}, max_update=1100)
    for n in (100, 350, 600, 1099):
        assert s.step_update(n, Budget(max_update=1100).progress(n, 0.0)) == pytest.approx(1e-3 * (1100 - n) / 1000)


def test_the_schedule_and_its_warmup_end_survive_a_checkpoint():
    a = schedule({"name": "linear", "warmup_updates": 10})
    walk(a, [(10, 0.25), (20, 0.5)])
    b = schedule({"name": "linear", "warmup_updates": 10})
    b.load_state_dict(a.state_dict())
    assert a.state_dict() == {"num_updates": 20, "progress": 0.5, "warmup_end": 0.25}
    assert b.get_lr() == a.get_lr() == pytest.approx(1e-3 * (1 - 0.5) / (1 - 0.25))
    # without the record (--reset-lr-scheduler): the warmup's end is estimated from an even pace of updates
    c = schedule({"name": "linear", "warmup_updates": 10})
    assert c.step_update(20, 0.5) == pytest.approx(1e-3 * (1 - 0.5) / (1 - 0.25))


def test_the_schedules_of_updates_ignore_progress_and_old_states_still_load():
    for group in ({"name": "inverse_sqrt", "warmup_updates": 40}, {"name": "cosine", "warmup_updates": 40},
                  {"name": "noam", "warmup_updates": 40}, {"name": "fixed"}):
        s = schedule(group, max_update=1000)
        for n in (0, 20, 40, 500, 1000):
            assert s.step_update(n, 0.9) == s.step_update(n) == s.lr_at(n)
        old = schedule(group, max_update=1000)
        old.load_state_dict({"num_updates": 500})  # a checkpoint written before progress was saved
        assert old.get_lr() == s.lr_at(500) and old.progress == 0.0


# ---------------------------------------------------------------------------------------------- progress and clock


def test_progress_is_the_larger_share_of_the_budgets_and_at_most_one():
    assert Budget(max_update=200).progress(50, 1e6) == 0.25
    assert Budget(seconds=100.0).progress(10**6, 30.0) == 0.3
    assert Budget(max_update=200, seconds=100.0).progress(50, 30.0) == 0.3  # time runs out first
    assert Budget(max_update=200, seconds=100.0).progress(150, 30.0) == 0.75  # the updates do
    assert Budget(max_update=200).progress(250, 0.0) == 1.0
    assert Budget().progress(50, 30.0) == 0.0 and not Budget()


def test_the_clock_leaves_out_what_runs_while_paused(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(budget_module.time, "perf_counter", lambda: now[0])
    clock = TrainingClock(before=7.0)  # 7 s trained before a resume
    now[0] += 5.0
    with clock.paused():  # a validation and a checkpoint write
        now[0] += 60.0
        with clock.paused():  # nested: counted once
            now[0] += 1.0
        assert clock.seconds() == 12.0
    now[0] += 3.0
    assert clock.seconds() == 15.0


def test_progress_points_are_parsed_and_checked():
    assert parse_progress_points("1, 0.92,0.96,0.92") == [0.92, 0.96, 1.0]
    for bad in ("0", "1.5", "half", "nan"):
        with pytest.raises(Exception, match="--save-at-progress"):
            parse_progress_points(bad)


# ---------------------------------------------------------------------------------------------- the weight average


class Tied(torch.nn.Module):
    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.emb = torch.nn.Embedding(4, 3).to(dtype)
        self.out = torch.nn.Linear(3, 4, bias=True).to(dtype)
        self.out.weight = self.emb.weight  # tied, as --share-all-embeddings ties them
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))


def test_the_average_follows_the_formula_once_per_tied_tensor():
    model = Tied()
    ema = WeightAverage(model, decay=0.9)
    start = model.emb.weight.detach().clone()
    expected = start.clone()
    with torch.no_grad():
        for k in range(1, 31):
            model.emb.weight.add_(0.1)
            ema.update()
            d = min(0.9, (1 + k) / (10 + k))
            expected = d * expected + (1 - d) * model.emb.weight
    state = ema.averaged_state(model)
    assert torch.allclose(state["emb.weight"], expected, atol=1e-6)
    assert state["out.weight"] is state["emb.weight"]  # tied names share one tensor, as in the model
    assert state["steps"].data_ptr() == model.steps.data_ptr()  # integer buffers are the model's own
    with ema.swapped_in():
        assert torch.equal(model.out.weight, state["emb.weight"])
    assert torch.allclose(model.emb.weight, start + 3.0)  # the trained weights are back


def test_the_average_of_a_bf16_model_is_kept_in_fp32():
    model = Tied(torch.bfloat16)
    ema = WeightAverage(model, decay=0.999)
    assert all(t.dtype == torch.float32 for t in ema.shadow.values())
    before = ema.shadow["emb.weight"].clone()
    with torch.no_grad():
        model.emb.weight.add_(0.5)
    ema.num_updates = 10**6  # past the early, faster average: the step is 0.0005 of the difference
    ema.update()
    moved = ema.shadow["emb.weight"] - before
    assert torch.allclose(moved, torch.full_like(moved, 0.0005), rtol=0.02)  # bf16 would round it away


# ---------------------------------------------------------------------------------------------- through nmt-train


def lrs(save_dir):
    return [(r["num_updates"], r["lr"]) for r in read_log(save_dir, "train_inner")]


def test_an_interrupted_run_resumes_the_same_schedule_and_average(small_bin, tmp_path, capsys):
    """An update budget: the run stopped after its first epoch and resumed logs the learning rates of the run that
    never stopped, and ends with the same weights, average and checkpoints at 0.5 and 1 of the budget."""
    run = [small_bin, *FAST, "--max-update", "18", "--lr-scheduler", "linear", "--warmup-updates", "4",
           "--ema-decay", "0.9", "--save-at-progress", "0.5,1", "--log-interval", "1"]
    run_train([*run, "--save-dir", tmp_path / "straight"])
    run_train([*run, "--save-dir", tmp_path / "resumed", "--max-epoch", "1"])  # 7 updates an epoch
    assert read_log(tmp_path / "resumed", "train_inner")[-1]["num_updates"] == 7
    run_train([*run, "--save-dir", tmp_path / "resumed"])
    straight, resumed = lrs(tmp_path / "straight"), lrs(tmp_path / "resumed")
    assert [n for n, _ in straight] == list(range(1, 19)) and resumed == straight
    assert straight[3][1] == pytest.approx(5e-4) and straight[-1][1] == 0.0  # the peak, then 0 at the budget's end
    for name in ("checkpoint_last.pt", "checkpoint_progress_0.500.pt", "checkpoint_progress_1.000.pt"):
        a, b = (load_checkpoint(tmp_path / run_dir / name) for run_dir in ("straight", "resumed"))
        assert a["training"]["num_updates"] == b["training"]["num_updates"]
        for key in a["model"]:
            assert torch.equal(a["model"][key], b["model"][key]), (name, key)
            assert torch.equal(a["training"]["ema"]["raw_model"][key], b["training"]["ema"]["raw_model"][key])
    last = load_checkpoint(tmp_path / "straight" / "checkpoint_last.pt")
    assert last["training"]["lr_scheduler"]["progress"] == 1.0
    assert load_checkpoint(tmp_path / "straight" / "checkpoint_progress_0.500.pt")["training"]["num_updates"] == 9
    weights, average = last["training"]["ema"]["raw_model"], last["model"]
    assert any(not torch.equal(weights[k], average[k]) for k in average)  # the model saved is the average

    # validation ran on the average: nmt-validate of checkpoint_last (its model) reports the run's last loss
    from nmt.cli.validate import main as validate

    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        validate([str(small_bin), "--path", str(tmp_path / "straight" / "checkpoint_last.pt")])
    assert e.value.code == 0
    assert f"| loss {read_log(tmp_path / 'straight', 'valid')[-1]['loss']:.3f} |" in capsys.readouterr().out


def test_a_time_budget_drives_the_schedule(small_bin, tmp_path, capsys):
    """--stop-time-hours 1e-9: the first update spends the whole budget, so the schedule is at its end and every
    progress checkpoint is taken with it."""
    save = tmp_path / "ck"
    run_train([small_bin, *FAST, "--save-dir", save, "--stop-time-hours", "1e-9", "--lr-scheduler", "cosine_budget",
               "--warmup-updates", "0", "--save-at-progress", "0.5,1", "--log-interval", "1"])
    assert lrs(save) == [(1, 0.0)]
    assert sorted(p.name for p in save.glob("checkpoint_progress_*.pt")) == [
        "checkpoint_progress_0.500.pt", "checkpoint_progress_1.000.pt"]
    assert "1 updates in" in capsys.readouterr().err


def test_validating_and_writing_checkpoints_are_not_training_time(small_bin, tmp_path, monkeypatch, capsys):
    """A clock that moves only while validating and saving (1000 s each time): the time budget of 0.1 hours is
    never reached and the checkpoints record no training time."""
    from nmt.checkpoint.manager import CheckpointManager
    from nmt.training.loop import TrainingRun

    now = [0.0]
    monkeypatch.setattr(budget_module.time, "perf_counter", lambda: now[0])
    validate, save = TrainingRun._validate, CheckpointManager.save

    def slow_validate(self):
        now[0] += 1000.0
        return validate(self)

    def slow_save(self, *args, **kwargs):
        now[0] += 1000.0
        return save(self, *args, **kwargs)

    monkeypatch.setattr(TrainingRun, "_validate", slow_validate)
    monkeypatch.setattr(CheckpointManager, "save", slow_save)
    save_dir = tmp_path / "ck"
    run_train([small_bin, *FAST, "--save-dir", save_dir, "--stop-time-hours", "0.1", "--max-update", "4",
               "--validate-interval-updates", "1", "--save-interval-updates", "1", "--lr-scheduler", "linear",
               "--warmup-updates", "0", "--log-interval", "1"])
    assert "done training: reached --max-update 4; 4 updates in 0.0 s of training" in capsys.readouterr().err
    assert load_checkpoint(save_dir / "checkpoint_last.pt")["training"]["extra"]["train_time"] == 0.0
    assert [lr for _, lr in lrs(save_dir)] == pytest.approx([3.75e-4, 2.5e-4, 1.25e-4, 0.0])  # the update budget's


def test_averaging_the_checkpoints_taken_at_shares_of_the_budget(small_bin, tmp_path, capsys):
    from nmt.cli.average_checkpoints import main as average

    save = tmp_path / "ck"
    run_train([small_bin, *FAST, "--save-dir", save, "--max-update", "8", "--save-at-progress", "0.25,0.5,0.75,1",
               "--no-epoch-checkpoints"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        average(["--inputs", str(save), "--num-progress-checkpoints", "2", "--output", str(tmp_path / "avg.pt")])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "checkpoint_progress_0.750.pt, checkpoint_progress_1.000.pt" in out
    a, b = (load_checkpoint(save / f"checkpoint_progress_{p}.pt")["model"] for p in ("0.750", "1.000"))
    averaged = load_checkpoint(tmp_path / "avg.pt")["model"]
    key = next(k for k in averaged if averaged[k].is_floating_point())
    assert torch.allclose(averaged[key], (a[key] + b[key]) / 2)


@pytest.mark.parametrize("argv, says", [
    (["--lr-scheduler", "linear", "--max-epoch", "1"],
     "--lr-scheduler linear follows the training budget: give --stop-time-hours H"),
    (["--lr-scheduler", "wsd", "--max-update", "5", "--cooldown-fraction", "0"], "--cooldown-fraction 0.0: must be"),
    (["--save-at-progress", "0.5", "--max-epoch", "1"], "--save-at-progress 0.5: progress is a share of the "),
    (["--save-at-progress", "0.5,2", "--max-update", "3"], "--save-at-progress 0.5,2: '2' is not a share"),
    (["--ema-decay", "1", "--max-update", "3"], "--ema-decay 1.0: must be in [0, 1)"),
])
def test_what_needs_a_budget_is_refused_in_one_line(small_bin, tmp_path, capsys, argv, says):
    save = tmp_path / "ck"
    assert call_train([small_bin, *FAST, "--save-dir", save, *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not list(save.glob("checkpoint*.pt"))
