"""Our beam search and greedy decoding on the real fairseq 0.12 model of the peer reference folder
(converted in memory by benchmarks/generate_speed.py) give fairseq-generate's own best hypotheses."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

from shared_paths import PEER_FAIRSEQ as PEER
ROOT = Path(__file__).resolve().parents[1]
N = 40

pytestmark = pytest.mark.skipif(not (PEER / "checkpoint_best.pt").is_file(), reason="peer fairseq model not here")


@pytest.fixture(scope="module")
def converted():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import generate_speed
    finally:
        sys.path.pop(0)
    from nmt.data.dictionary import Dictionary
    from nmt.generation.ensemble import EnsembleModel
    from nmt.plugin_loader import load_plugins

    load_plugins()
    torch.set_num_threads(1)
    d = Dictionary.load(PEER / "data-bin" / "dict.en.txt")
    return d, EnsembleModel([generate_speed.fairseq_model(PEER, d, d)])


@pytest.mark.parametrize("beam", [5, 1])
def test_same_best_hypotheses_as_fairseq_generate(converted, beam):
    from nmt.config.generate import GenerationConfig
    from nmt.generation.inference import pad_batch
    from nmt.generation.search import build_search

    d, ens = converted
    lines = (PEER / "test_2016_flickr.bpe.en").read_text(encoding="utf-8").splitlines()[:N]
    text = (PEER / f"test2016.beam{beam}.fairseq-generate.txt").read_text(encoding="utf-8")
    theirs = {int(m.group(1)): (float(m.group(2)), m.group(3))
              for m in re.finditer(r"^H-(\d+)\t([^\t]*)\t(.*)$", text, re.M)}
    src, lengths = pad_batch([d.encode_line(line) for line in lines], d.pad())
    hyps = build_search(GenerationConfig(beam=beam), d, decoder_start=d.eos()).search(ens, src, lengths)
    for i, h in enumerate(hyps):
        score, words = theirs[i]
        assert d.string(h[0].tokens, bpe_symbol="@@ ") == words, i
        assert h[0].score / torch.log(torch.tensor(2.0)).item() == pytest.approx(score, abs=2e-3), i
