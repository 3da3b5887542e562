"""Shared test fixtures."""

import pytest
import torch


@pytest.fixture(autouse=True)
def restore_torch_threads():
    """Tests that run training in-process may set torch's thread count; put it back after each."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)
