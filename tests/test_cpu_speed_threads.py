"""A search runs the steps of a few rows (a lone sentence) on one thread and larger ones on the threads the process
was given, and leaves the process's thread count as it found it (nmt.cpu_speed.threads)."""

from __future__ import annotations

import torch

from nmt.cpu_speed import threads
from nmt.cpu_speed.threads import SMALL_ROWS, fit_threads, searching
from nmt.generation.ensemble import EnsembleModel


def test_a_search_takes_one_thread_for_few_rows_and_gives_the_count_back(monkeypatch):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        fit_threads(1)  # outside a search: nothing changes (a user's own torch code keeps its threads)
        assert torch.get_num_threads() == 2
        with searching():
            fit_threads(5)
            assert torch.get_num_threads() == 1
            fit_threads(SMALL_ROWS + 1)
            assert torch.get_num_threads() == 2
            fit_threads(SMALL_ROWS)
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2  # restored after a search that ended on few rows
        with searching():
            fit_threads(3)
            torch.set_num_threads(2)  # nmt-serve gives this worker another share of the cores between steps ...
            fit_threads(SMALL_ROWS * 8)
            assert torch.get_num_threads() == 2  # ... which the large steps then use
            torch.set_num_threads(1)  # and takes it back
            fit_threads(SMALL_ROWS * 8)
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 1  # a count set by someone else is left as they set it
    finally:
        torch.set_num_threads(before)


def test_the_ensemble_fits_the_threads_to_its_rows_before_each_step(monkeypatch):
    seen = []
    monkeypatch.setattr("nmt.generation.ensemble.fit_threads", seen.append)

    class Member(torch.nn.Module):
        def decoder(self, tokens, enc, incremental_state=None):
            return torch.zeros(tokens.size(0), 1, 7), None

        def encoder(self, src_tokens, src_lengths):
            return src_tokens

    ens = EnsembleModel([Member()])
    ens.encode(torch.ones(2, 9, dtype=torch.long), torch.tensor([9, 4]))
    ens.step(torch.ones(10, 3, dtype=torch.long), [None], [None])
    assert seen == [13, 10]  # source tokens, then decoder rows
    assert threads._state.ceiling is None
