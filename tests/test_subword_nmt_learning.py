"""`--bpe subword_nmt` learns the codes subword-nmt itself learns: with the C argmax patched into its learner
(plugins/bpe/subword_nmt.py, only for the releases in PATCHED_VERSIONS) and without it (any other release, or a
copy installed without its metadata), byte for byte, ties between equal pair counts included."""

from __future__ import annotations

import contextlib
import io
import random
from importlib import metadata

import pytest
from subword_nmt import learn_bpe as learn_bpe_module

from nmt.plugin_loader import load_plugins

MERGES = 400


@pytest.fixture
def plugin():
    load_plugins(None, ("bpe",))
    from nmt.plugins.bpe import subword_nmt

    return subword_nmt


@pytest.fixture
def argmax_calls(plugin, monkeypatch):
    """How often the patched-in argmax runs while the plugin learns."""
    calls = []
    fast = plugin._argmax_count_then_pair

    def counted(*args, **kwargs):
        calls.append(1)
        return fast(*args, **kwargs)

    monkeypatch.setattr(plugin, "_argmax_count_then_pair", counted)
    return calls


def word_counts() -> dict[str, int]:
    """Short words over six letters with small counts: many pairs tie, so the tie-break decides merges."""
    rng = random.Random(0)
    return {"".join(rng.choice("abcdeé") for _ in range(rng.randint(2, 9))): rng.randint(1, 4) for _ in range(3000)}


def subword_nmt_codes(counts: dict[str, int]) -> str:
    """subword-nmt's own learner, as it is installed."""
    out = io.StringIO()
    with contextlib.redirect_stderr(io.StringIO()):
        learn_bpe_module.learn_bpe(io.StringIO("".join(f"{w} {c}\n" for w, c in sorted(counts.items()))), out,
                                   MERGES, min_frequency=2, is_dict=True)
    return out.getvalue()


def plugin_codes(plugin, counts: dict[str, int], path) -> str:
    plugin.SubwordNmtBPE.learn(plugin.SubwordNmtConfig(bpe_merges=MERGES), counts, path)
    return path.read_text(encoding="utf-8")


def test_a_checked_release_learns_patched_and_gives_the_same_codes(plugin, argmax_calls, tmp_path):
    version = metadata.version("subword-nmt")
    if version not in plugin.PATCHED_VERSIONS:
        pytest.skip(f"subword-nmt {version} is not a release the patch was checked against")
    counts = word_counts()
    codes = plugin_codes(plugin, counts, tmp_path / "bpe.codes")
    assert argmax_calls, "the C argmax never ran"
    assert not hasattr(learn_bpe_module, "max")  # the patch is undone
    assert len(codes.splitlines()) == MERGES + 1  # the version line, then the merges
    assert codes == subword_nmt_codes(counts)


def _unknown_release(name: str) -> str:
    return "99.0"


def _not_installed(name: str) -> str:
    raise metadata.PackageNotFoundError(name)


@pytest.mark.parametrize("version", [_unknown_release, _not_installed], ids=["unknown-release", "no-metadata"])
def test_another_release_learns_unpatched_and_gives_the_same_codes(plugin, argmax_calls, monkeypatch, tmp_path,
                                                                   version):
    monkeypatch.setattr(metadata, "version", version)
    with plugin._fast_argmax() as patched:
        assert patched is False and not hasattr(learn_bpe_module, "max")
    counts = word_counts()
    codes = plugin_codes(plugin, counts, tmp_path / "bpe.codes")
    assert not argmax_calls
    assert codes == subword_nmt_codes(counts)
