"""--compile: the decoder step through torch.compile (EnsembleModel.compile_decoders). The compiled search
translates like the eager one (fp32); after nmt-serve's warm-up, a lone sentence or a padded batch compiles
nothing more; --compile with --quantize is refused in one line."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

import nmt
from nmt.cli.generate import main as generate_main
from nmt.serve.batcher import DynamicBatcher, Job
from nmt.serve.process import warm_up
from test_generate_setup import call_cli


@pytest.fixture(scope="module")
def models(exported_model):
    before = torch.get_num_threads()
    yield nmt.load(exported_model.folder, threads=1), nmt.load(exported_model.folder, compile=True, threads=1)
    torch.set_num_threads(before)


def compiled_graphs() -> int:
    return counters["stats"]["unique_graphs"]


@pytest.mark.slow  # torch.compile of the decoder step: over a minute
def test_after_the_warm_up_the_kinds_of_step_it_met_compile_no_more(models, exported_model):
    eager, compiled = models
    assert all(isinstance(d, torch._dynamo.eval_frame.OptimizedModule) for d in compiled.ens.decoders)
    assert eager.ens.decoders == [eager.ens.models[0].decoder]  # eager unless asked
    gen = compiled.generation_config(beam=2)

    def new_batcher() -> DynamicBatcher:
        return DynamicBatcher(compiled, max_tokens=8192, max_sentences=128, wait_seconds=0, max_queue=2048)

    before = compiled_graphs()
    warm_up(compiled, gen, new_batcher)
    assert compiled_graphs() > before  # the warm-up compiled the step
    warmed = compiled_graphs()
    sentences = (exported_model.raw / "test.en").read_text(encoding="utf-8").splitlines()
    batcher = new_batcher()
    batcher.start()
    try:
        for group in ([sentences[0]], sentences[1:4]):  # a lone sentence, then a padded batch: other lengths
            batcher.submit(Job(group, [compiled.encode(s) for s in group], gen)).result()
    finally:
        batcher.close()
    assert compiled_graphs() == warmed


@pytest.mark.slow  # compiles the step when run without the test above
@pytest.mark.parametrize("beam", [1, 2])
def test_compiled_search_translates_like_the_eager_one(models, exported_model, beam):
    eager, compiled = models
    sentences = (exported_model.raw / "test.en").read_text(encoding="utf-8").splitlines()
    got = compiled.translate_detailed(sentences, beam=beam, nbest=beam, batch_size=4)
    want = eager.translate_detailed(sentences, beam=beam, nbest=beam, batch_size=4)
    for g, w in zip(got, want):
        assert [h.tokens for h in g.hypotheses] == [h.tokens for h in w.hypotheses]
        assert [h.score for h in g.hypotheses] == pytest.approx([h.score for h in w.hypotheses], abs=1e-4)


def test_compile_with_quantize_is_one_line(exported_model, capsys):
    capsys.readouterr()
    assert call_cli(generate_main, [exported_model.data, "--path", str(exported_model.folder), "--compile",
                                    "--quantize", "int8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("nmt-generate: error: --compile and --quantize int8: choose one (torch.compile does not take the "
                   "dynamic-quantized layers); --compile --bf16 is the faster pair on the CPU")
