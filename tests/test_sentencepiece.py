"""`--bpe sentencepiece` through the real commands: nmt-preprocess learns a unigram or BPE model on the raw
training split (the same files for any --workers), nmt-train trains a tiny model a few updates on it, and
nmt-generate, nmt-interactive and a model folder loaded with nmt.load all turn its pieces back into the
detokenized text; bad option values are one line each."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest

import nmt
from model_folder_setup import detokenized, export
from nmt.cli.generate import main as generate_main
from nmt.cli.import_fairseq import main as import_main
from nmt.cli.interactive import main as interactive_main
from nmt.data.text_pipeline import load_text_pipeline, normalize_space
from nmt.plugins.bpe.sentencepiece import SPACE, sampled_lines
from preprocess_cli_helpers import base_args, run_preprocess
from shared_paths import PEER_FAIRSEQ
from test_generate_setup import call_cli, one_error_line
from train_toy_data import TINY_MODEL, run_train

pytest.importorskip("sentencepiece")  # the plugin module itself imports it only when used

EN_DE = {"the": "die", "a": "eine", "cat": "Katze", "dog": "Hund", "sat": "saß", "ran": "lief", "on": "auf",
         "mat": "Matte", "big": "große", "small": "kleine", "red": "rote", "house": "Häuser", "tree": "Bäume"}
SPM = ["--bpe", "sentencepiece", "--spm-vocab-size", "60"]


def write_raw_corpus(folder: Path, n_train: int = 80, n_test: int = 6, seed: int = 0) -> Path:
    """Raw text: capitals, punctuation glued to words, German umlauts and ß (what a tokenizer would split)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        en, de = [], []
        for _ in range(n):
            words = [rng.choice(list(EN_DE)) for _ in range(rng.randint(2, 6))]
            end = rng.choice([".", "!", ", ok."])
            en.append((" ".join(words) + end).capitalize())
            de.append((" ".join(EN_DE[w] for w in words) + end.replace("ok", "gut")).capitalize())
        (folder / f"{split}.en").write_text("\n".join(en) + "\n", encoding="utf-8")
        (folder / f"{split}.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    return folder


def preprocess(raw: Path, dest: Path, capsys, *extra: str) -> None:
    code, out, err = run_preprocess(base_args(str(raw / "train"), dest, "--testpref", str(raw / "test"),
                                              "--keep-text", *extra), capsys)
    assert code == 0, err


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    return write_raw_corpus(tmp_path_factory.mktemp("spm_raw"))


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_preprocess_learns_on_raw_text_and_pieces_decode_to_it(raw, tmp_path, capsys, model_type):
    """Joint model (spm.model, no subword-nmt codes), its options in metadata.json, the pieces of every split
    decode back to the raw line, and --workers 2 writes the very same files as --workers 1."""
    options = [*SPM, "--spm-model-type", model_type, "--joined-dictionary"]
    preprocess(raw, tmp_path / "w1", capsys, *options, "--workers", "1")
    preprocess(raw, tmp_path / "w2", capsys, *options, "--workers", "2")
    files = sorted(p.name for p in (tmp_path / "w1").iterdir() if p.is_file())
    assert "spm.model" in files and not any(f.startswith("bpe.codes") for f in files)
    for name in [*files, "text/train.de", "text/test.en"]:
        assert (tmp_path / "w1" / name).read_bytes() == (tmp_path / "w2" / name).read_bytes(), name

    bpe = json.loads((tmp_path / "w1" / "metadata.json").read_text(encoding="utf-8"))["pipeline"]["bpe"]
    assert bpe == {"name": "sentencepiece", "spm_model_type": model_type, "spm_vocab_size": 60,
                   "spm_character_coverage": 1.0, "spm_input_sentence_size": 1_000_000, "spm_sample_seed": 1,
                   "spm_normalization": "nmt_nfkc", "codes": {"en": "spm.model", "de": "spm.model"}}
    for split in ("train", "test"):
        for lang in ("en", "de"):
            pipeline = load_text_pipeline(tmp_path / "w1", lang)
            raw_lines = (raw / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
            pieces = (tmp_path / "w1" / "text" / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
            assert all(line.startswith(SPACE) for line in pieces)
            assert pieces == [pipeline.encode(line) for line in raw_lines]
            assert [pipeline.decode(line) for line in pieces] == raw_lines  # detokenized: "Hund." not "Hund ."
    assert len(pieces[0].split()) > len(raw_lines[0].split())  # 60 pieces cannot hold every word whole


def test_one_model_per_language_without_joined_dictionary(raw, tmp_path, capsys):
    preprocess(raw, tmp_path / "bin", capsys, "--bpe", "sentencepiece", "--spm-vocab-size", "45")
    meta = json.loads((tmp_path / "bin" / "metadata.json").read_text(encoding="utf-8"))
    assert meta["pipeline"]["bpe"]["codes"] == {"en": "spm.model.en", "de": "spm.model.de"}
    assert (tmp_path / "bin" / "spm.model.en").read_bytes() != (tmp_path / "bin" / "spm.model.de").read_bytes()
    assert "ß" in (tmp_path / "bin" / "dict.de.txt").read_text(encoding="utf-8")
    assert "ß" not in (tmp_path / "bin" / "dict.en.txt").read_text(encoding="utf-8")


def test_sample_is_seeded_and_keeps_line_order(tmp_path):
    (tmp_path / "a").write_text("".join(f"a{i}  x\n" for i in range(50)), encoding="utf-8")
    (tmp_path / "b").write_text("".join(f"b{i}\n" for i in range(50)), encoding="utf-8")
    files = [tmp_path / "a", tmp_path / "b"]
    every = list(sampled_lines(files, 0, 1))
    assert every == [f"a{i} x" for i in range(50)] + [f"b{i}" for i in range(50)]
    assert list(sampled_lines(files, 100, 1)) == every
    sample = list(sampled_lines(files, 30, 1))
    assert len(sample) == 30 and sample == [line for line in every if line in sample]
    assert any(line.startswith("b") for line in sample) and any(line.startswith("a") for line in sample)
    assert list(sampled_lines(files, 30, 1)) == sample and list(sampled_lines(files, 30, 2)) != sample


def test_the_sample_size_and_seed_change_the_model(raw, tmp_path, capsys):
    models = {}
    for name, extra in (("all", []), ("seed1", ["--spm-input-sentence-size", "40"]),
                        ("seed1_again", ["--spm-input-sentence-size", "40"]),
                        ("seed2", ["--spm-input-sentence-size", "40", "--spm-sample-seed", "2"])):
        preprocess(raw, tmp_path / name, capsys, "--bpe", "sentencepiece", "--spm-vocab-size", "40",
                   "--joined-dictionary", *extra)
        models[name] = (tmp_path / name / "spm.model").read_bytes()
    assert models["seed1"] == models["seed1_again"]
    assert len({models["all"], models["seed1"], models["seed2"]}) == 3


def test_identity_normalization_keeps_the_exact_text(tmp_path, capsys):
    """nmt_nfkc (the default) decodes "ﬁ" (a ligature) and "½" to their compatibility forms; identity keeps them."""
    raw = write_raw_corpus(tmp_path / "raw", n_train=40)
    for lang in ("en", "de"):
        with open(raw / f"train.{lang}", "a", encoding="utf-8") as f:
            f.write("½ ﬁne cat.\n")
    line = "The ﬁne cat sat ½."
    decoded = {}
    for rule in ("nmt_nfkc", "identity"):
        preprocess(raw, tmp_path / rule, capsys, *SPM, "--joined-dictionary", "--spm-normalization", rule)
        pipeline = load_text_pipeline(tmp_path / rule, "en")
        decoded[rule] = pipeline.decode(pipeline.encode(line))
    assert decoded == {"nmt_nfkc": "The fine cat sat 1⁄2.", "identity": line}


@pytest.mark.parametrize("options, needle", [
    (["--spm-model-type", "word"], "--spm-model-type 'word': choose one of unigram, bpe"),
    (["--spm-vocab-size", "1"], "--spm-vocab-size 1: must be >= 2"),
    (["--spm-character-coverage", "0.5"], "--spm-character-coverage 0.5: must be in [0.98, 1]"),
    (["--spm-input-sentence-size", "-1"], "--spm-input-sentence-size -1: must be >= 0"),
    (["--spm-sample-seed", "-3"], "--spm-sample-seed -3: must be in [0, 4294967295]"),
    (["--spm-normalization", "nfd"], "--spm-normalization 'nfd': choose one of nmt_nfkc, nfkc, identity"),
    (["--bpe-merges", "100"], "--bpe sentencepiece takes no option bpe_merges (--bpe-merges)"),
    (["--spm-vocab-size", "5000"], "--spm-vocab-size 5000: the training split holds too few distinct pieces"),
    (["--spm-vocab-size", "10"], "--spm-vocab-size 10: the training split has more characters to cover; give at "
                                 "least"),
])
def test_bad_option_values_are_one_line_and_write_nothing(raw, tmp_path, capsys, options, needle):
    code, _, err = run_preprocess(base_args(str(raw / "train"), tmp_path / "bin", "--bpe", "sentencepiece",
                                            *options), capsys)
    assert code != 0
    one_error_line(err, "nmt-preprocess", needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_without_the_package_one_line_names_the_extra(raw, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # `import sentencepiece` raises ImportError
    code, _, err = run_preprocess(base_args(str(raw / "train"), tmp_path / "bin", *SPM), capsys)
    assert code == 2
    one_error_line(err, "nmt-preprocess", "--bpe sentencepiece needs the sentencepiece package: "
                                          "pip install 'nmt[sentencepiece]'")
    assert not (tmp_path / "bin").exists()


def test_a_damaged_model_is_one_line(raw, tmp_path, capsys):
    preprocess(raw, tmp_path / "bin", capsys, *SPM, "--joined-dictionary")
    (tmp_path / "bin" / "spm.model").write_bytes(b"SECRET not a model\n")
    code = call_cli(generate_main, [tmp_path / "bin", "--path", tmp_path / "none.pt"])
    assert code == 1
    line = one_error_line(capsys.readouterr().err, "nmt-generate", "spm.model: not a sentencepiece model")
    assert "SECRET" not in line


def test_trained_model_translates_raw_text_everywhere_alike(raw, tmp_path, capsys):
    """nmt-generate's D- lines are its H- pieces decoded (no "▁" left) and are scored by sacreBLEU against
    the raw reference; nmt-interactive on the raw test file and nmt.load of the exported model folder give
    the very same lines."""
    data = tmp_path / "bin"
    preprocess(raw, data, capsys, *SPM, "--joined-dictionary")
    save = tmp_path / "ck"
    run_train([data, *TINY_MODEL, "--max-tokens", "256", "--max-update", "60", "--lr", "5e-3", "--warmup-updates",
               "10", "--num-threads", "1", "--valid-subset", "test", "--save-dir", save, "--log-format", "none",
               "--dropout", "0", "--no-epoch-checkpoints"])
    capsys.readouterr()
    options = ["--path", save / "checkpoint_last.pt", "--beam", "2", "--max-len-b", "8", "--threads", "1"]
    assert call_cli(generate_main, [data, *options]) == 0
    out = capsys.readouterr().out
    hypotheses = {int(m.group(1)): m.group(2) for m in re.finditer(r"^H-(\d+)\t[^\t]*\t(.*)$", out, re.M)}
    translations = detokenized(out)
    assert len(translations) == 6 and set(hypotheses) == set(translations)
    for i, pieces in hypotheses.items():
        assert translations[i] == normalize_space("".join(pieces.split()).replace(SPACE, " "))
        assert SPACE not in translations[i]
    assert SPACE in "".join(hypotheses.values())
    assert "BLEU = " in out and f"(detokenized, against {data / 'raw' / 'test.de'})" in out
    ordered = [translations[i] for i in range(6)]

    assert call_cli(interactive_main, [data, *options, "--input", raw / "test.en"]) == 0
    assert capsys.readouterr().out.splitlines() == ordered

    assert export(data, "--path", save / "checkpoint_last.pt", "--output", tmp_path / "model") == 0
    assert (tmp_path / "model" / "spm.model").read_bytes() == (data / "spm.model").read_bytes()
    model = nmt.load(tmp_path / "model", threads=1)
    sentences = (raw / "test.en").read_text(encoding="utf-8").splitlines()
    assert model.translate(sentences, beam=2, max_len_b=8) == ordered
    assert model.tokenize(sentences[0])[0].startswith(SPACE)


@pytest.mark.skipif(not (PEER_FAIRSEQ / "data-bin").is_dir(), reason="peer fairseq data-bin not here")
def test_import_fairseq_stores_a_sentencepiece_model_under_its_name(raw, tmp_path, capsys):
    """fairseq data made with --bpe sentencepiece: its .model file goes in as spm.model and is used."""
    preprocess(raw, tmp_path / "bin", capsys, *SPM, "--joined-dictionary")
    out = tmp_path / "imported"
    assert call_cli(import_main, ["data", "--path", PEER_FAIRSEQ / "data-bin", "--output", out, "--bpe",
                                  "sentencepiece", "--bpe-codes", tmp_path / "bin" / "spm.model"]) == 0
    assert (out / "spm.model").read_bytes() == (tmp_path / "bin" / "spm.model").read_bytes()
    assert json.loads((out / "metadata.json").read_text(encoding="utf-8"))["pipeline"]["bpe"]["codes"] == {
        "en": "spm.model", "de": "spm.model"}
    pipeline = load_text_pipeline(out, "de")
    assert pipeline.decode(pipeline.encode("Ein Hund lief.")) == "Ein Hund lief."
