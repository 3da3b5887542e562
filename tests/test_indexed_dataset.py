"""The .bin/.idx format: exact round-trip, smallest dtype, O(1) access, corrupt files refused."""

import numpy as np
import pytest

from nmt.data.indexed_dataset import FORMAT_VERSION, HEADER, MAGIC, IndexedDataset, write_dataset
from nmt.errors import DataError


def random_sentences(n: int, vocab: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=rng.integers(0, 30)) for _ in range(n)]


@pytest.mark.parametrize("vocab,dtype", [(200, np.uint8), (40000, np.uint16), (100000, np.uint32)])
def test_round_trip_and_dtype(tmp_path, vocab, dtype):
    sents = random_sentences(500, vocab)
    write_dataset(tmp_path / "x", sents, np.dtype(dtype))
    ds = IndexedDataset(tmp_path / "x")
    assert len(ds) == 500 and ds.dtype == dtype
    assert isinstance(ds.tokens, np.memmap) and isinstance(ds.sizes, np.memmap)
    assert ds.sizes.tolist() == [len(s) for s in sents]
    for i in (0, 499, 250, -1):
        assert ds[i].tolist() == sents[i].tolist()
    assert [a.tolist() for a in ds] == [s.tolist() for s in sents]
    assert (tmp_path / "x.bin").stat().st_size == sum(map(len, sents)) * np.dtype(dtype).itemsize


def test_empty_dataset_and_empty_sentences(tmp_path):
    write_dataset(tmp_path / "empty", [], np.dtype(np.uint8))
    assert len(IndexedDataset(tmp_path / "empty")) == 0
    write_dataset(tmp_path / "blank", [np.array([], dtype=np.int64)] * 3, np.dtype(np.uint8))
    ds = IndexedDataset(tmp_path / "blank")
    assert len(ds) == 3 and ds[1].tolist() == []


def test_index_out_of_range(tmp_path):
    write_dataset(tmp_path / "x", random_sentences(3, 10), np.dtype(np.uint8))
    with pytest.raises(IndexError):
        IndexedDataset(tmp_path / "x")[3]


def _corrupt(path, offset, data):
    raw = bytearray(path.read_bytes())
    raw[offset:offset + len(data)] = data
    path.write_bytes(bytes(raw))


def test_bad_magic_version_and_truncation_are_refused(tmp_path):
    write_dataset(tmp_path / "x", random_sentences(10, 10), np.dtype(np.uint8))
    idx = tmp_path / "x.idx"
    good = idx.read_bytes()
    assert good[:8] == MAGIC
    _corrupt(idx, 0, b"FAIRSEQ!")
    with pytest.raises(DataError, match="bad magic"):
        IndexedDataset(tmp_path / "x")
    idx.write_bytes(good)
    _corrupt(idx, 8, (FORMAT_VERSION + 1).to_bytes(4, "little"))
    with pytest.raises(DataError, match="format version"):
        IndexedDataset(tmp_path / "x")
    idx.write_bytes(good)
    binf = tmp_path / "x.bin"
    binf.write_bytes(binf.read_bytes()[:-1])
    with pytest.raises(DataError, match="do not match"):
        IndexedDataset(tmp_path / "x")
    with pytest.raises(DataError, match="missing"):
        IndexedDataset(tmp_path / "nothing")
    assert HEADER.size == 32


def test_pickles_by_path_not_by_content(tmp_path):
    import pickle

    sents = random_sentences(50, 1000)
    write_dataset(tmp_path / "x", sents, np.dtype(np.uint16))
    blob = pickle.dumps(IndexedDataset(tmp_path / "x"))
    assert len(blob) < 500  # the prefix only
    again = pickle.loads(blob)
    assert again[7].tolist() == sents[7].tolist() and isinstance(again.tokens, np.memmap)
