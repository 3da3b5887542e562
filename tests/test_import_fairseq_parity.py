"""The real fairseq 0.12 model of the peer reference folder, imported with nmt-import-fairseq, translates
test_2016_flickr as fairseq-generate did (its stored H- lines): the proof that our Transformer, our
searches and the importer are right. The full run goes through the real commands (slow)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import torch

from shared_paths import MULTI30K, PEER_FAIRSEQ as PEER

N = 40  # sentences of the quick in-process check

pytestmark = pytest.mark.skipif(not (PEER / "checkpoint_best.pt").is_file(), reason="peer fairseq model not here")


def fairseq_hypotheses(beam: int) -> dict[int, tuple[float, str]]:
    """fairseq-generate's best hypothesis per sentence id: (score in base 2, text with BPE removed)."""
    text = (PEER / f"test2016.beam{beam}.fairseq-generate.txt").read_text(encoding="utf-8")
    return {int(m.group(1)): (float(m.group(2)), m.group(3))
            for m in re.finditer(r"^H-(\d+)\t([^\t]*)\t(.*)$", text, re.M)}


@pytest.fixture(scope="module")
def imported():
    from nmt.generation.ensemble import EnsembleModel
    from nmt.interop.fairseq_checkpoint import build_imported_model
    from nmt.interop.fairseq_data import read_fairseq_dictionary
    from nmt.interop.fairseq_unpickle import load_fairseq_file

    torch.set_num_threads(1)
    path = PEER / "checkpoint_best.pt"
    d = read_fairseq_dictionary(PEER / "data-bin" / "dict.en.txt")
    return d, EnsembleModel([build_imported_model(load_fairseq_file(path), path, d, d)])


@pytest.mark.parametrize("beam", [5, 1])
def test_same_best_hypotheses_and_scores_as_fairseq_generate(imported, beam):
    from nmt.config.generate import GenerationConfig
    from nmt.generation.inference import decoder_start, pad_batch
    from nmt.generation.search import build_search

    d, ens = imported
    lines = (PEER / "test_2016_flickr.bpe.en").read_text(encoding="utf-8").splitlines()[:N]
    theirs = fairseq_hypotheses(beam)
    src, lengths = pad_batch([d.encode_line(line) for line in lines], d.pad())
    search = build_search(GenerationConfig(beam=beam), d, decoder_start=decoder_start(ens, d))
    with torch.inference_mode():
        hyps = search.search(ens, src, lengths)
    for i, h in enumerate(hyps):
        score, words = theirs[i]
        assert d.string(h[0].tokens, bpe_symbol="@@ ") == words, i
        assert h[0].score / torch.log(torch.tensor(2.0)).item() == pytest.approx(score, abs=2e-3), i


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_real_commands_translate_the_test_set_like_fairseq_generate(tmp_path):
    """nmt-import-fairseq data + checkpoint, then nmt-generate --beam 1 and --beam 5 --batch-size 128 on all
    1,000 sentences: greedy identical everywhere, beam 5 at least 990, detokenized BLEU within 0.1."""
    import gzip

    if shutil.which("nmt-import-fairseq") is None or shutil.which("nmt-generate") is None:
        pytest.skip("the console scripts are not on PATH (pip install -e .)")

    from sacremoses import MosesDetokenizer

    from nmt.generation.output import corpus_scores

    bin_dir, ckpt, ref = tmp_path / "bin", tmp_path / "imported.pt", tmp_path / "ref.de"
    with gzip.open(MULTI30K / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        ref.write_text(f.read(), encoding="utf-8")
    _run(["nmt-import-fairseq", "data", "--path", str(PEER / "data-bin"), "--output", str(bin_dir), "--tokenizer",
          "moses", "--bpe", "subword_nmt", "--bpe-codes", str(PEER / "bpe.codes")])
    _run(["nmt-import-fairseq", "checkpoint", "--path", str(PEER / "checkpoint_best.pt"), "--data", str(bin_dir),
          "--output", str(ckpt)])
    detok = MosesDetokenizer(lang="de")
    refs = ref.read_text(encoding="utf-8").splitlines()
    for beam, needed in ((1, 1000), (5, 990)):
        out = _run(["nmt-generate", str(bin_dir), "--path", str(ckpt), "--beam", str(beam), "--batch-size", "128",
                    "--reference", str(ref)])
        ours = {int(m.group(1)): (m.group(2) + " ").replace("@@ ", "").rstrip()
                for m in re.finditer(r"^H-(\d+)\t[^\t]*\t(.*)$", out, re.M)}
        theirs = fairseq_hypotheses(beam)
        same = sum(ours[i] == theirs[i][1] for i in theirs)
        our_bleu = float(re.search(r"beam=\d+: BLEU = ([\d.]+)", out).group(1))
        their_bleu = round(corpus_scores([detok.detokenize(theirs[i][1].split()) for i in sorted(theirs)], refs,
                                         chrf=False)[0][0].score, 2)  # as sacreBLEU's line (and ours) shows it
        print(f"beam {beam}: {same}/{len(theirs)} identical; BLEU ours {our_bleu:.2f}, fairseq's {their_bleu:.2f}")
        assert len(ours) == len(theirs) == 1000
        assert same >= needed
        assert abs(our_bleu - their_bleu) <= 0.1
