"""Shared by the nmt-generate / nmt-interactive / averaging tests: a tiny data-bin made by the real
nmt-preprocess (Moses tokenizer + subword-nmt BPE) and tiny checkpoints made through the checkpoint
API. The models are random: the tests check the plumbing, not translation quality."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Callable

import torch

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "mat", "house", "red", "big", "small", "tree"]


def call_cli(main: Callable[[list[str]], None], argv: list) -> int:
    """Run an nmt command's entry point in this process; its exit code (0 when it just returns)."""
    try:
        main([str(a) for a in argv])
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


def make_data_bin(folder: Path, n_train: int = 60, n_test: int = 9, seed: int = 0) -> Path:
    """Raw en/de text (de = en upper-cased, with a comma or full stop) binarized with BPE."""
    from nmt.cli.preprocess import main as preprocess

    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        en, de = [], []
        for _ in range(n):
            words = [rng.choice(WORDS) for _ in range(rng.randint(2, 7))]
            en.append(" ".join(words) + rng.choice([".", ", ok.", "!"]))
            de.append(" ".join(w.upper() for w in words) + ".")
        (folder / f"{split}.en").write_text("\n".join(en) + "\n", encoding="utf-8")
        (folder / f"{split}.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    dest = folder / "bin"
    code = call_cli(preprocess, ["--source-lang", "en", "--target-lang", "de", "--trainpref", folder / "train",
                                 "--testpref", folder / "test", "--destdir", dest, "--joined-dictionary",
                                 "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-merges", "30"])
    assert code == 0
    return dest


def split_batches(data_bin: Path, size: int) -> tuple[object, list]:
    """The data-bin's DataDir and its test split as a search takes it: (ids, src_tokens, src_lengths) per
    ``size`` sentences, in order."""
    from nmt.data.data_bin import open_data_dir
    from nmt.data.language_pair_dataset import load_language_pair

    data = open_data_dir(str(data_bin), None, None)
    ds = load_language_pair(str(data_bin), "test", data.src, data.tgt)
    batches = []
    for start in range(0, len(ds), size):
        b = ds.collater([ds[i] for i in range(start, min(start + size, len(ds)))])
        batches.append((b["id"].tolist(), b["net_input"]["src_tokens"], b["net_input"]["src_lengths"]))
    return data, batches


def tiny_model_config(**changes) -> dict:
    from nmt.config.model import ModelConfig

    values = dict(encoder_layers=1, decoder_layers=2, encoder_embed_dim=16, decoder_embed_dim=16,
                  encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=2,
                  decoder_attention_heads=2, share_all_embeddings=True, dropout=0.0)
    cfg = ModelConfig(**{**values, **changes})
    return dict(cfg.__dict__)


def make_checkpoint(data_bin: Path, path: Path, seed: int = 0, epoch: int = 1, num_updates: int = 10,
                    **model_changes) -> Path:
    """A randomly initialised tiny model saved with build_state + save_checkpoint."""
    from nmt.checkpoint.format import build_state, save_checkpoint
    from nmt.data.dictionary import Dictionary
    from nmt.models.build import build_model
    from nmt.plugin_loader import load_plugins

    load_plugins()
    d = Dictionary.load(data_bin / "dict.en.txt")
    cfg = tiny_model_config(**model_changes)
    torch.manual_seed(seed)
    model = build_model(cfg, d, d)
    with torch.no_grad():  # sharper, seed-dependent distributions: outputs differ between seeds
        model.decoder.output_weight.mul_(8.0)
    state = build_state(model=model, config={"model": cfg}, epoch=epoch, num_updates=num_updates,
                        dictionaries={"source": d, "target": d})
    save_checkpoint(path, state)
    return path


def one_error_line(err: str, prog: str, *needles: str) -> str:
    """The single ``prog: error: ...`` line a failed command must print (no traceback, nothing else
    on stderr); each of ``needles`` must be in it."""
    lines = err.strip().splitlines()
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    for needle in needles:
        assert needle in lines[0], err
    return lines[0]


def edited_checkpoint(src: Path, dst: Path, edit: Callable[[dict], None]) -> Path:
    """A copy of checkpoint ``src`` whose model weights ``edit`` changed in place."""
    from nmt.checkpoint.format import load_checkpoint, save_checkpoint

    state = load_checkpoint(src)
    edit(state["model"])
    save_checkpoint(dst, state)
    return dst
