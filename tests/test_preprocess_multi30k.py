"""Acceptance on real data: Multi30k en-de with Moses + joint BPE (10k merges) + a joined
dictionary, 2 workers. Every binarized training sentence must decode to its BPE text exactly,
and the pipeline stored in the data folder must reproduce that text from the raw input."""

import gzip
import json

import pytest

from nmt.data.dictionary import Dictionary
from nmt.data.indexed_dataset import IndexedDataset
from nmt.data.text_pipeline import load_text_pipeline
from preprocess_cli_helpers import run_subprocess
from shared_paths import MULTI30K

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (MULTI30K / "train.en.gz").is_file(), reason="Multi30k not available")]


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    dest = tmp_path_factory.mktemp("m30k") / "bin"
    proc = run_subprocess(["nmt.cli.preprocess", "--source-lang", "en", "--target-lang", "de",
                           "--trainpref", str(MULTI30K / "train"), "--validpref", str(MULTI30K / "val"),
                           "--testpref", str(MULTI30K / "test_2016_flickr"), "--destdir", str(dest),
                           "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-merges", "10000",
                           "--joined-dictionary", "--workers", "2", "--keep-text"], timeout=1800)
    assert proc.returncode == 0, proc.stderr
    return dest


def test_counts_and_dictionary(data_bin):
    meta = json.loads((data_bin / "metadata.json").read_text())
    sizes = {split: meta["splits"][split]["en"]["sentences"] for split in ("train", "valid", "test")}
    assert sizes == {"train": 29000, "valid": 1014, "test": 1000}
    assert meta["splits"]["train"]["de"]["unk"] == 0
    d = Dictionary.load(data_bin / "dict.en.txt")
    assert len(d) % 8 == 0 and meta["dictionaries"]["de"]["fingerprint"] == d.fingerprint()
    assert (data_bin / "bpe.codes").is_file()


@pytest.mark.parametrize("lang", ["en", "de"])
def test_every_training_sentence_round_trips(data_bin, lang):
    d = Dictionary.load(data_bin / f"dict.{lang}.txt")
    ds = IndexedDataset(data_bin / f"train.en-de.{lang}")
    text = (data_bin / "text" / f"train.{lang}").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(text) == len(ds) == 29000
    mismatches = [i for i in range(len(ds)) if d.string(ds[i]) != text[i]]
    assert mismatches == []


def test_stored_pipeline_reproduces_the_text(data_bin):
    pipe = load_text_pipeline(data_bin, "en")
    with gzip.open(MULTI30K / "train.en.gz", "rt", encoding="utf-8") as f:
        raw = [next(f).rstrip("\n") for _ in range(200)]
    text = (data_bin / "text" / "train.en").read_text(encoding="utf-8").split("\n")[:200]
    assert [pipe.encode(line) for line in raw] == text
    assert pipe.decode(text[0]) == raw[0]
