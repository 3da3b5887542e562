"""nmt.generation.topk.wide_topk gives torch.topk's values and columns (beam search's candidates)."""

from __future__ import annotations

import pytest
import torch

from nmt.generation.topk import BLOCK, wide_topk


@pytest.mark.parametrize("width", [5 * 9808, 40 * BLOCK, 40 * BLOCK + 7, 3 * BLOCK])
@pytest.mark.parametrize("k", [1, 10])
def test_equals_torch_topk(width, k):
    g = torch.Generator().manual_seed(width + k)
    x = torch.log_softmax(torch.randn(33, width, generator=g) * 3, dim=1)
    x[0, :] = float("-inf")  # a row with one finite value: the length limit forces eos
    x[0, width - 1] = -1.0
    x[1, : width // 2] = float("-inf")  # a beam that does not run yet
    values, columns = wide_topk(x, k)
    expected_values, expected_columns = x.topk(k, dim=1)
    assert torch.equal(values, expected_values)
    finite = torch.isfinite(expected_values)  # among -inf ties any column will do
    assert torch.equal(columns[finite], expected_columns[finite])
    assert torch.equal(x.gather(1, columns), values)


def test_the_best_value_in_the_short_last_block_is_found():
    x = torch.zeros(2, 40 * BLOCK + 3)
    x[0, -1], x[1, -3] = 5.0, 4.0
    values, columns = wide_topk(x, 2)
    assert columns[:, 0].tolist() == [x.size(1) - 1, x.size(1) - 3]
    assert values[:, 0].tolist() == [5.0, 4.0]
