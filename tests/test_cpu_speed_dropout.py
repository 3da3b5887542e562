"""nmt.cpu_speed.dropout: the CPU mask from 16-bit lanes keeps the expectation, the rate and the seeding of
torch's dropout, and its gradient is the same mask; LaneDropout is nn.Dropout with that mask."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nmt.cpu_speed.dropout import LaneDropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_rate_and_expectation(p):
    torch.manual_seed(0)
    x = torch.ones(200, 50, 100)
    y = dropout(x, p, training=True)
    kept = y != 0
    assert abs(1 - kept.float().mean().item() - p) < 0.005  # 1M elements: the rate within 5 standard errors
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / (1 - p)), rtol=1e-4)
    assert abs(y.mean().item() - 1.0) < 0.01  # the expectation is the input


def test_every_lane_is_used_and_shapes_are_kept():
    """An odd element count (not a multiple of four lanes) and a non-contiguous input."""
    torch.manual_seed(0)
    x = torch.randn(7, 13, 3).transpose(0, 2)
    y = dropout(x, 0.5, training=True)
    assert y.shape == x.shape and ((y == 0) | torch.isclose(y, 2 * x)).all()
    assert 0 < int((y == 0).sum()) < x.numel()


def test_seeded_like_torch_and_differs_between_calls():
    x = torch.ones(64, 64)
    torch.manual_seed(3)
    a, b = dropout(x, 0.2, True), dropout(x, 0.2, True)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.2, True), a) and not torch.equal(a, b)


def test_gradient_is_the_mask():
    torch.manual_seed(0)
    x = torch.randn(32, 16, requires_grad=True)
    y = dropout(x, 0.25, True)
    y.sum().backward()
    assert torch.equal(x.grad != 0, y != 0) and torch.allclose(x.grad[y != 0], torch.tensor(1 / 0.75))


def test_off_and_edge_cases_are_torch_s():
    x = torch.randn(10, 10)
    assert dropout(x, 0.3, training=False) is x and dropout(x, 0.0, training=True) is x
    assert torch.equal(dropout(x, 1.0, training=True), F.dropout(x, 1.0, True))  # all dropped
    torch.manual_seed(0)
    y = dropout(x.to(torch.bfloat16), 0.1, True)
    assert y.dtype == torch.bfloat16


def test_the_module_is_nn_dropout_with_the_lane_mask():
    plain = torch.nn.Dropout(0.2).eval()
    lane = LaneDropout.replacing(plain)
    assert isinstance(lane, torch.nn.Dropout) and lane.p == 0.2 and not lane.training
    x = torch.ones(64, 64)
    assert lane(x) is x  # eval: the input itself, as nn.Dropout's
    lane.train()
    torch.manual_seed(3)
    masked = lane(x)
    torch.manual_seed(3)
    assert torch.equal(masked, dropout(x, 0.2, True))
