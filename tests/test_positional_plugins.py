"""Positional plugins: the paper's sinusoid formula, any length, no parameters; the learned
table and its limit."""

import math

import pytest
import torch

from nmt.errors import DataError
from nmt.plugin_loader import load_plugins
from nmt.registry import POSITIONAL

load_plugins()


def test_sinusoidal_matches_the_formula_at_any_length_without_parameters():
    pe = POSITIONAL.build("sinusoidal", None, 6, max_positions=4)
    table = pe(50, offset=3)  # longer than max_positions: the table grows
    assert table.shape == (50, 6) and list(pe.parameters()) == [] and pe.state_dict() == {}
    for pos in (3, 17, 52):
        for i in range(3):
            angle = pos / 10000 ** (2 * i / 6)
            assert math.isclose(table[pos - 3, 2 * i].item(), math.sin(angle), abs_tol=1e-5)
            assert math.isclose(table[pos - 3, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-5)
    assert torch.equal(pe(2, offset=10), table[7:9])


def test_sinusoidal_odd_dimension():
    assert POSITIONAL.build("sinusoidal", None, 5, max_positions=8)(3).shape == (3, 5)


def test_learned_table_has_max_positions_rows_and_refuses_beyond():
    pe = POSITIONAL.build("learned", None, 8, max_positions=10, option="--max-target-positions")
    assert pe.weight.shape == (10, 8)
    assert torch.equal(pe(3, offset=7), pe.weight[7:10])
    with pytest.raises(DataError, match="--max-target-positions 10"):
        pe(3, offset=8)


@pytest.mark.parametrize("name", ["sinusoidal", "fairseq_sinusoidal", "learned"])
def test_one_position_per_row_reads_the_same_table(name):
    """Rows decoding at different steps (a refilled batch) each get their own position."""
    pe = POSITIONAL.build(name, None, 6, max_positions=40)
    positions = torch.tensor([0, 5, 2, 30, 5])
    table = pe(31)  # positions 0 .. 30
    assert torch.equal(pe.at(positions), table[positions])


@pytest.mark.parametrize("name", ["sinusoidal", "fairseq_sinusoidal", "learned", "none"])
def test_one_position_per_row_compiles_without_a_graph_break(name):
    """Under --compile the decoder step of a refilled batch reads positions per row: reading their
    largest (a Tensor.item()) would split the compiled step in two."""
    pe = POSITIONAL.build(name, None, 6, max_positions=40)
    positions = torch.tensor([0, 5, 2, 39, 5])
    explained = torch._dynamo.explain(pe.at)(positions)
    assert explained.graph_break_count == 0, explained.break_reasons
    torch._dynamo.reset()
    with torch.no_grad():
        assert torch.equal(torch.compile(pe.at, backend="eager")(positions), pe.at(positions))


def test_none_adds_nothing_so_order_comes_only_from_attention():
    pe = POSITIONAL.build("none", None, 6, max_positions=4)
    assert torch.equal(pe(9, offset=3), torch.zeros(9, 6))
    assert torch.equal(pe.at(torch.tensor([0, 5])), torch.zeros(2, 6))
    assert not list(pe.state_dict())  # nothing stored in checkpoints
