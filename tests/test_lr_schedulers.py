"""LR schedules at known steps: inverse_sqrt's warmup end and decay, noam's peak, cosine's end,
and resuming from the saved update count."""

import math

import pytest
import torch

from nmt.errors import ConfigError
from nmt.plugin_loader import load_plugins
from nmt.training.lr_scheduler import build_lr_scheduler

load_plugins()


def optimizer():
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=123.0)


def schedule(group, lr=5e-4, model_dim=512, max_update=0, opt=None):
    return build_lr_scheduler(group, opt or optimizer(), lr, model_dim=model_dim, max_update=max_update)


def test_inverse_sqrt_warms_up_linearly_then_decays():
    s = schedule({"name": "inverse_sqrt", "warmup_updates": 4000})
    assert s.get_lr() == 0.0  # fairseq: warmup starts at 0 by default
    assert s.step_update(2000) == pytest.approx(2.5e-4)
    assert s.step_update(4000) == pytest.approx(5e-4)
    assert s.step_update(16000) == pytest.approx(2.5e-4)  # lr * sqrt(4000 / 16000)
    assert s.optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-4)


def test_inverse_sqrt_warmup_init_lr_and_no_warmup():
    s = schedule({"name": "inverse_sqrt", "warmup_updates": 10, "warmup_init_lr": 1e-7}, lr=1e-3)
    assert s.get_lr() == pytest.approx(1e-7)
    assert s.step_update(5) == pytest.approx((1e-7 + 1e-3) / 2)
    s = schedule({"name": "inverse_sqrt", "warmup_updates": 0}, lr=1e-3)
    assert s.get_lr() == pytest.approx(1e-3) and s.step_update(4) == pytest.approx(5e-4)


def test_noam_peaks_at_warmup():
    s = schedule({"name": "noam", "warmup_updates": 4000}, lr=1.0, model_dim=512)
    peak = 512 ** -0.5 * 4000 ** -0.5
    assert s.step_update(4000) == pytest.approx(peak)
    assert s.step_update(3999) < peak and s.step_update(4001) < peak
    assert s.step_update(1000) == pytest.approx(peak * 1000 / 4000)
    assert s.step_update(16000) == pytest.approx(peak / 2)
    assert s.step_update(0) > 0  # step 0 is read as 1: the first update is not wasted
    assert schedule({"name": "noam", "warmup_updates": 4000}, lr=2.0).step_update(4000) == pytest.approx(2 * peak)


def test_cosine_warmup_middle_and_end():
    group = {"name": "cosine", "warmup_updates": 100, "min_lr": 1e-5}
    s = schedule(group, lr=1e-3, max_update=1100)
    assert s.step_update(50) == pytest.approx(5e-4)
    assert s.step_update(100) == pytest.approx(1e-3)
    assert s.step_update(600) == pytest.approx((1e-3 + 1e-5) / 2)
    assert s.step_update(1100) == pytest.approx(1e-5)
    assert s.step_update(5000) == pytest.approx(1e-5)
    period = schedule({**group, "lr_period_updates": 200}, lr=1e-3)
    assert period.step_update(300) == pytest.approx(1e-5)


def test_cosine_needs_a_length():
    with pytest.raises(ConfigError, match="--max-update"):
        schedule({"name": "cosine"}, max_update=0)


def test_fixed_is_constant():
    s = schedule({"name": "fixed"}, lr=3e-4)
    assert [s.step_update(n) for n in (0, 10, 10_000)] == [3e-4] * 3


def test_resume_from_state_dict():
    a = schedule({"name": "inverse_sqrt", "warmup_updates": 4000})
    a.step_update(5000)
    b = schedule({"name": "inverse_sqrt", "warmup_updates": 4000})
    b.load_state_dict(a.state_dict())
    assert b.get_lr() == a.get_lr() == pytest.approx(5e-4 * math.sqrt(4000 / 5000))


def test_unknown_scheduler_names_the_flag():
    with pytest.raises(ConfigError, match="--lr-scheduler"):
        schedule({"name": "inverse_sqr"})
