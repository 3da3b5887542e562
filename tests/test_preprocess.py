"""nmt-preprocess on toy corpora: output, metadata, workers-invariance, gz input, reruns,
and the LanguagePairDataset contract on what it wrote."""

import gzip
import json

import numpy as np
import pytest

from nmt.data.indexed_dataset import IndexedDataset
from nmt.data.language_pair_dataset import load_language_pair
from nmt.data.text_pipeline import load_text_pipeline
from preprocess_cli_helpers import DE, EN, base_args, run_preprocess, write_corpus


@pytest.fixture
def corpus(tmp_path):
    train = write_corpus(tmp_path / "raw", "train", EN * 40, DE * 40)
    valid = write_corpus(tmp_path / "raw", "valid", ["a cat sat on a zebra"], ["eine katze sass auf einem zebra"])
    return tmp_path, train, valid


def test_writes_dictionaries_splits_and_metadata(corpus, capsys):
    tmp, train, valid = corpus
    code, out, err = run_preprocess(base_args(train, tmp / "bin", "--validpref", valid), capsys)
    assert code == 0, err
    meta = json.loads((tmp / "bin" / "metadata.json").read_text())
    assert meta["langs"] == ["en", "de"] and meta["format_version"] == 1
    assert meta["splits"]["train"]["en"]["sentences"] == 200
    assert meta["splits"]["train"]["en"]["empty_lines"] == 40  # kept and counted
    assert meta["splits"]["valid"]["en"]["unk"] == 1  # "zebra" is not in the training text
    assert meta["splits"]["valid"]["en"]["unk_rate"] == pytest.approx(1 / 6, abs=1e-5)
    assert "valid" in out and "types" in out  # the summary
    dict_lines = (tmp / "bin" / "dict.en.txt").read_text().splitlines()
    assert dict_lines[0].split() == ["the", "160"]  # most frequent first
    assert (len(dict_lines) + 4) % 8 == 0
    ds = load_language_pair(tmp / "bin", "train", "en", "de")
    assert len(ds) == 200 and ds.src_dict.string(ds[0]["source"]) == EN[0]
    assert ds[2]["source"].tolist() == [ds.src_dict.eos()]  # the empty line
    # the raw text of every split but train is kept: nmt-generate's BLEU reference
    assert (tmp / "bin" / "raw" / "valid.de").read_text() == "eine katze sass auf einem zebra\n"
    assert not (tmp / "bin" / "raw" / "train.de").exists()


def test_output_is_identical_with_more_workers_and_from_gzip(corpus, capsys):
    tmp, train, valid = corpus
    for lang in ("en", "de"):  # the same text, gzipped, under another prefix
        src = tmp / "raw" / f"train.{lang}"
        (tmp / "gz").mkdir(exist_ok=True)
        with gzip.open(tmp / "gz" / f"train.{lang}.gz", "wb") as f:
            f.write(src.read_bytes())
    runs = {"w1": (train, "1"), "w3": (train, "3"), "from_gz": (str(tmp / "gz" / "train"), "2")}
    for name, (pref, workers) in runs.items():
        code, _, err = run_preprocess(base_args(pref, tmp / name, "--workers", workers), capsys)
        assert code == 0, err
    for name in ("w3", "from_gz"):
        for f in ("dict.en.txt", "dict.de.txt", "train.en-de.en.bin", "train.en-de.en.idx",
                  "train.en-de.de.bin", "train.en-de.de.idx"):
            assert (tmp / name / f).read_bytes() == (tmp / "w1" / f).read_bytes(), (name, f)


def test_joined_dictionary_and_given_dictionary(corpus, capsys):
    tmp, train, _ = corpus
    code, _, err = run_preprocess(base_args(train, tmp / "joined", "--joined-dictionary"), capsys)
    assert code == 0, err
    assert (tmp / "joined" / "dict.en.txt").read_bytes() == (tmp / "joined" / "dict.de.txt").read_bytes()
    assert "katze" in (tmp / "joined" / "dict.en.txt").read_text()
    code, _, err = run_preprocess(base_args(train, tmp / "given", "--srcdict", tmp / "joined" / "dict.en.txt",
                                            "--tgtdict", tmp / "joined" / "dict.de.txt"), capsys)
    assert code == 0, err
    assert (tmp / "given" / "dict.en.txt").read_bytes() == (tmp / "joined" / "dict.en.txt").read_bytes()


def test_rerun_is_a_no_op_and_changed_options_need_overwrite(corpus, capsys):
    tmp, train, _ = corpus
    args = base_args(train, tmp / "bin")
    assert run_preprocess(args, capsys)[0] == 0
    code, out, _ = run_preprocess(args, capsys)
    assert code == 0 and "up to date" in out
    code, _, err = run_preprocess(args + ["--thresholdsrc", "50"], capsys)
    assert code == 2 and "--overwrite" in err
    code, _, err = run_preprocess(args + ["--thresholdsrc", "50", "--overwrite"], capsys)
    assert code == 0, err
    assert "mat" not in (tmp / "bin" / "dict.en.txt").read_text()  # seen 40 times < 50
    assert [p.name for p in tmp.iterdir() if p.name.startswith(".bin")] == []  # no temp folders left


def test_bpe_pipeline_is_stored_and_rebuilt(corpus, capsys):
    tmp, train, _ = corpus
    code, _, err = run_preprocess(base_args(train, tmp / "bpe", "--bpe", "subword_nmt", "--bpe-merges", "20",
                                            "--keep-text", "--joined-dictionary"), capsys)
    assert code == 0, err
    meta = json.loads((tmp / "bpe" / "metadata.json").read_text())
    assert meta["pipeline"]["bpe"]["codes"] == {"en": "bpe.codes", "de": "bpe.codes"}
    pipe = load_text_pipeline(tmp / "bpe", "en")
    text = (tmp / "bpe" / "text" / "train.en").read_text().splitlines()
    assert "@@" in " ".join(text)
    assert [pipe.encode(x) for x in EN] == text[:5]
    assert [pipe.decode(pipe.encode(x)) for x in EN] == EN
    ds = IndexedDataset(tmp / "bpe" / "train.en-de.en")
    d = load_language_pair(tmp / "bpe", "train", "en", "de").src_dict
    assert [d.string(ds[i]) for i in range(5)] == text[:5]


def test_collater_follows_the_contract(corpus, capsys):
    tmp, train, _ = corpus
    assert run_preprocess(base_args(train, tmp / "bin"), capsys)[0] == 0
    ds = load_language_pair(tmp / "bin", "train", "en", "de")
    assert isinstance(ds.src_sizes, np.ndarray) and ds.src_sizes[0] == 7  # 6 words + eos
    assert ds.num_tokens(0) == max(ds.src_sizes[0], ds.tgt_sizes[0])
    batch = ds.collater([ds[0], ds[1]])
    pad, bos = ds.tgt_dict.pad(), ds.tgt_dict.bos()
    assert batch["nsentences"] == 2 and batch["id"].tolist() == [0, 1]
    assert batch["ntokens"] == int(ds.tgt_sizes[0] + ds.tgt_sizes[1])
    tgt, prev = batch["target"], batch["net_input"]["prev_output_tokens"]
    assert tgt.shape == prev.shape == (2, int(max(ds.tgt_sizes[:2])))
    assert prev[:, 0].tolist() == [bos, bos]
    assert prev[0, 1:].tolist() == tgt[0, :-1].tolist()
    assert tgt[1, -1].item() == pad and batch["net_input"]["src_lengths"].tolist() == ds.src_sizes[:2].tolist()
    start_eos = load_language_pair(tmp / "bin", "train", "en", "de", decoder_start=2)
    assert start_eos.collater([start_eos[0]])["net_input"]["prev_output_tokens"][0, 0].item() == 2


def test_block_binarization_fast_path_equals_the_per_line_path():
    from collections import Counter

    from nmt.data.binarizer import _lines_to_ids
    from nmt.data.dictionary import Dictionary

    d = Dictionary.from_counts(Counter("a b c".split()))
    lookup = {**d.indices, "\x00": -1}
    lines = ["a b", "", "c \t a", "z </s>"]
    ids, sizes = _lines_to_ids(lines, d, lookup)  # the fast path (one split for the block)
    a, b, c, eos, unk = d.index("a"), d.index("b"), d.index("c"), d.eos(), d.unk()
    assert ids.tolist() == [a, b, eos, eos, c, a, eos, unk, eos, eos]
    assert sizes.tolist() == [3, 1, 3, 3]
    ids2, sizes2 = _lines_to_ids(lines + ["\x00"], d, lookup)  # a sentinel word forces the per-line path
    assert ids2[:len(ids)].tolist() == ids.tolist() and sizes2.tolist() == [3, 1, 3, 3, 2]


def test_preprocessing_never_imports_torch(corpus):
    """torch costs 1-2 s to import; nmt-preprocess (and opening a dataset's sizes) needs none of it."""
    import subprocess
    import sys

    tmp, train, _ = corpus
    code = ("import sys\n"
            "from nmt.cli.preprocess import main\n"
            f"try:\n    main({base_args(train, tmp / 'bin', '--workers', '2')!r})\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "from nmt.data.language_pair_dataset import load_language_pair\n"
            f"ds = load_language_pair({str(tmp / 'bin')!r}, 'train', 'en', 'de')\n"
            "assert ds.src_sizes[0] == 7 and ds.src[0][-1] == 2\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_byte_ranges_and_small_blocks_see_every_line_once(tmp_path, monkeypatch, parts):
    from nmt.data import corpus_files

    monkeypatch.setattr(corpus_files, "BLOCK_BYTES", 5)  # lines longer than a block must still come whole
    lines = ["", "ä", "a much longer line than five bytes", "x y", "", "crlf\r", "last without newline"]
    path = tmp_path / "f.txt"
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode("utf-8"))  # with a byte-order mark
    ranges = corpus_files.byte_ranges(path, parts)
    assert ranges[0][0] == 0 and ranges[-1][1] == path.stat().st_size
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    seen = [ln for a, b in ranges for block in corpus_files.iter_text_blocks(path, a, b, "f.txt") for ln in block]
    assert seen == [ln.rstrip("\r") for ln in lines]
    assert corpus_files.count_lines(path) == len(lines)
