"""nmt-import-fairseq on a tiny fairseq-format checkpoint built here (fairseq's key names and a pickled
argparse.Namespace, no fairseq install): the imported model must compute what fairseq's Transformer
computes (a reference written out below), unsafe or unmappable files must be refused by name, and the
stored fairseq data-bin must convert losslessly."""

from __future__ import annotations

import argparse
import math
import os
import re
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from nmt.cli.import_fairseq import main as import_main
from nmt.data.dictionary import Dictionary
from shared_paths import PEER_FAIRSEQ

torch.set_num_threads(1)
V, D, FFN, HEADS = 24, 16, 32, 4


def tiny_args(**over) -> argparse.Namespace:
    args = dict(arch="transformer", encoder_embed_dim=D, decoder_embed_dim=D, encoder_ffn_embed_dim=FFN,
                decoder_ffn_embed_dim=FFN, encoder_layers=2, decoder_layers=2, encoder_attention_heads=HEADS,
                decoder_attention_heads=HEADS, encoder_normalize_before=False, decoder_normalize_before=False,
                share_all_embeddings=True, share_decoder_input_output_embed=True, encoder_learned_pos=False,
                decoder_learned_pos=False, layernorm_embedding=False, no_scale_embedding=False, dropout=0.3,
                attention_dropout=0.0, activation_dropout=0.0, activation_fn="relu", adaptive_input=False,
                max_source_positions=64, max_target_positions=64, decoder_output_dim=D, decoder_input_dim=D,
                source_lang="en", target_lang="de")
    args.update(over)
    return argparse.Namespace(**args)


def tiny_weights(a: argparse.Namespace) -> OrderedDict:
    """Random weights under fairseq 0.12's names for ``a``."""
    g = torch.Generator().manual_seed(0)
    w: OrderedDict = OrderedDict()

    def rand(*shape):
        return torch.randn(*shape, generator=g) * 0.3

    def attn(prefix):
        for x in "kvq":
            w[f"{prefix}.{x}_proj.weight"], w[f"{prefix}.{x}_proj.bias"] = rand(D, D), rand(D)
        w[f"{prefix}.out_proj.weight"], w[f"{prefix}.out_proj.bias"] = rand(D, D), rand(D)

    def norm(name):
        w[f"{name}.weight"], w[f"{name}.bias"] = 1 + rand(D), rand(D)

    shared = rand(V, D)
    for side in ("encoder", "decoder"):
        w[f"{side}.version"] = torch.tensor([3.0])
        w[f"{side}.embed_tokens.weight"] = shared if a.share_all_embeddings else rand(V, D)
        if getattr(a, f"{side}_learned_pos"):
            w[f"{side}.embed_positions.weight"] = rand(a.max_source_positions + 2, D)
        for i in range(getattr(a, f"{side}_layers")):
            p = f"{side}.layers.{i}"
            attn(f"{p}.self_attn")
            norm(f"{p}.self_attn_layer_norm")
            if side == "decoder":
                attn(f"{p}.encoder_attn")
                norm(f"{p}.encoder_attn_layer_norm")
            w[f"{p}.fc1.weight"], w[f"{p}.fc1.bias"] = rand(FFN, D), rand(FFN)
            w[f"{p}.fc2.weight"], w[f"{p}.fc2.bias"] = rand(D, FFN), rand(D)
            norm(f"{p}.final_layer_norm")
        if getattr(a, f"{side}_normalize_before"):
            norm(f"{side}.layer_norm")
    tied = a.share_all_embeddings or a.share_decoder_input_output_embed
    w["decoder.output_projection.weight"] = w["decoder.embed_tokens.weight"] if tied else rand(V, D)
    return w


# ------------------------------------------------------------------ fairseq's Transformer, written out


def ref_positions(tokens, side, a, w, pad=1):
    """fairseq: non-pad tokens numbered pad+1, pad+2, ...; sinusoids [sin | cos], freq 10000^(-i/(half-1))."""
    mask = tokens.ne(pad).long()
    positions = torch.cumsum(mask, 1) * mask + pad  # (B, L)
    if getattr(a, f"{side}_learned_pos"):
        return w[f"{side}.embed_positions.weight"][positions]
    half = D // 2
    out = torch.zeros(*positions.shape, D)
    for b in range(positions.size(0)):
        for t in range(positions.size(1)):
            p = int(positions[b, t])
            for i in range(half):
                angle = p * math.exp(-i * math.log(10000) / (half - 1))
                out[b, t, i], out[b, t, half + i] = math.sin(angle), math.cos(angle)
    return out * mask[..., None]


def ref_attention(w, prefix, x, kv, key_pad, causal):
    B, T, _ = x.shape
    hd = D // HEADS

    def proj(name, y):
        out = F.linear(y, w[f"{prefix}.{name}_proj.weight"], w[f"{prefix}.{name}_proj.bias"])
        return out.view(B, -1, HEADS, hd).transpose(1, 2)  # (B, H, L, hd)

    q, k, v = proj("q", x) * hd ** -0.5, proj("k", kv), proj("v", kv)
    scores = q @ k.transpose(-1, -2)  # (B, H, T, S)
    scores = scores.masked_fill(key_pad[:, None, None, :], float("-inf"))
    if causal:
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
    return F.linear(out, w[f"{prefix}.out_proj.weight"], w[f"{prefix}.out_proj.bias"])


def ref_forward(w, a, src, prev):
    def ln(name, y):
        return F.layer_norm(y, (D,), w[f"{name}.weight"], w[f"{name}.bias"])

    def sub(side, name, x, fn):  # residual block in fairseq's pre/post-norm order
        before = getattr(a, f"{side}_normalize_before")
        y = fn(ln(name, x) if before else x)
        return x + y if before else ln(name, x + y)

    def ffn(p):
        return lambda y: F.linear(F.relu(F.linear(y, w[f"{p}.fc1.weight"], w[f"{p}.fc1.bias"])),
                                  w[f"{p}.fc2.weight"], w[f"{p}.fc2.bias"])

    src_pad = src.eq(1)
    x = w["encoder.embed_tokens.weight"][src] * math.sqrt(D) + ref_positions(src, "encoder", a, w)
    for i in range(a.encoder_layers):
        p = f"encoder.layers.{i}"
        x = sub("encoder", f"{p}.self_attn_layer_norm", x,
                lambda y, p=p: ref_attention(w, f"{p}.self_attn", y, y, src_pad, False))
        x = sub("encoder", f"{p}.final_layer_norm", x, ffn(p))
    enc = ln("encoder.layer_norm", x) if a.encoder_normalize_before else x
    x = w["decoder.embed_tokens.weight"][prev] * math.sqrt(D) + ref_positions(prev, "decoder", a, w)
    no_pad = torch.zeros_like(prev, dtype=torch.bool)
    for i in range(a.decoder_layers):
        p = f"decoder.layers.{i}"
        x = sub("decoder", f"{p}.self_attn_layer_norm", x,
                lambda y, p=p: ref_attention(w, f"{p}.self_attn", y, y, no_pad, True))
        x = sub("decoder", f"{p}.encoder_attn_layer_norm", x,
                lambda y, p=p: ref_attention(w, f"{p}.encoder_attn", y, enc, src_pad, False))
        x = sub("decoder", f"{p}.final_layer_norm", x, ffn(p))
    if a.decoder_normalize_before:
        x = ln("decoder.layer_norm", x)
    return F.linear(x, w["decoder.output_projection.weight"])  # (B, T, V)


# ------------------------------------------------------------------ helpers


def data_dir(tmp_path: Path) -> Path:
    d = Dictionary()
    for i in range(V - 4):
        d.add_symbol(f"w{i}", V - i)
    folder = tmp_path / "data"
    folder.mkdir()
    for lang in ("en", "de"):
        d.save(folder / f"dict.{lang}.txt")  # our dict files are fairseq's format
    return folder


def run_cli(argv) -> int:
    with pytest.raises(SystemExit) as e:
        import_main(argv)
    return e.value.code


def import_tiny(tmp_path, args, weights=None, extra=None):
    ckpt = tmp_path / "fairseq.pt"
    torch.save({"args": args, "model": weights if weights is not None else tiny_weights(args),
                "optimizer_history": [{"num_updates": 7}], **(extra or {})}, ckpt)
    out = tmp_path / "imported.pt"
    code = run_cli(["checkpoint", "--path", str(ckpt), "--data", str(data_dir(tmp_path)), "--output", str(out)])
    return code, out


# ------------------------------------------------------------------ tests


@pytest.mark.parametrize("variant", [
    {},  # the peer model's kind: post-norm, shared embeddings, sinusoids
    {"encoder_normalize_before": True, "decoder_normalize_before": True, "share_all_embeddings": False,
     "share_decoder_input_output_embed": False, "encoder_learned_pos": True, "decoder_learned_pos": True},
])
def test_imported_model_computes_what_fairseq_computes(tmp_path, variant):
    from nmt.generation.ensemble import EnsembleModel
    from nmt.generation.inference import decoder_start
    from nmt.generation.loading import load_model

    args = tiny_args(**variant)
    weights = tiny_weights(args)
    code, out = import_tiny(tmp_path, args, weights)
    assert code == 0 and out.is_file()
    d = Dictionary.load(tmp_path / "data" / "dict.en.txt")
    model = load_model(str(out), d, d)
    assert decoder_start(EnsembleModel([model]), d) == d.eos()  # fairseq decoders start from </s>
    src = torch.tensor([[5, 9, 7, 11, 2], [6, 8, 2, 1, 1]])
    prev = torch.tensor([[2, 12, 13, 14], [2, 15, 1, 1]])  # </s> first, right-padded
    with torch.no_grad():
        ours = model(src, torch.tensor([5, 3]), prev)
        ref = ref_forward(weights, args, src, prev)
    real = prev.ne(1)
    torch.testing.assert_close(ours[real], ref[real], atol=1e-4, rtol=1e-4)


def test_omegaconf_cfg_is_on_the_allow_list(tmp_path):
    from omegaconf import OmegaConf

    args = tiny_args()
    cfg = OmegaConf.create({"model": vars(args), "task": {"source_lang": "en", "target_lang": "de"}})
    code, out = import_tiny(tmp_path, None, tiny_weights(args), extra={"cfg": cfg})
    assert code == 0 and out.is_file()


class _Canary:
    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


def test_a_pickled_call_is_refused_by_name_and_never_runs(tmp_path, capsys):
    canary = tmp_path / "canary"
    args = tiny_args()
    code, out = import_tiny(tmp_path, args, extra={"extra_state": {"x": _Canary(canary)}})
    err = capsys.readouterr().err
    assert code == 1 and not out.exists()
    assert not canary.exists()  # the pickled os.system call never ran
    assert "system" in err and "allow-list" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("change, named", [
    ({"arch": "lstm"}, "'lstm'"),
    ({"arch": "bart_base"}, "'bart_base'"),
    ({"layernorm_embedding": True}, "--layernorm-embedding"),
    ({"activation_fn": "gelu_fast"}, "--activation-fn"),
])
def test_unmappable_models_are_refused_by_name(tmp_path, capsys, change, named):
    code, out = import_tiny(tmp_path, tiny_args(**change), tiny_weights(tiny_args()))
    err = capsys.readouterr().err
    assert code == 1 and not out.exists()
    assert named in err and err.startswith("nmt-import-fairseq checkpoint: error:")


def test_leftover_fairseq_weights_are_refused(tmp_path, capsys):
    weights = tiny_weights(tiny_args())
    weights["encoder.layernorm_embedding.weight"] = torch.ones(D)
    code, _ = import_tiny(tmp_path, tiny_args(), weights)
    assert code == 1 and "encoder.layernorm_embedding.weight" in capsys.readouterr().err


def test_wrong_dictionary_is_refused(tmp_path, capsys):
    args = tiny_args()
    weights = tiny_weights(args)
    weights["encoder.embed_tokens.weight"] = weights["decoder.embed_tokens.weight"] = torch.zeros(V + 8, D)
    code, _ = import_tiny(tmp_path, args, weights)
    assert code == 1 and "rows but the dictionary has" in capsys.readouterr().err


peer = pytest.mark.skipif(not (PEER_FAIRSEQ / "data-bin").is_dir(), reason="peer fairseq data-bin not here")


@peer
def test_fairseq_data_bin_reader_on_the_stored_files():
    from nmt.interop.fairseq_data import FairseqIndexedDataset, read_fairseq_dictionary

    d = read_fairseq_dictionary(PEER_FAIRSEQ / "data-bin" / "dict.en.txt")
    assert len(d) == 9808 and d.symbols[:4] == ["<s>", "<pad>", "</s>", "<unk>"] and len(d) % 8 == 0
    ds = FairseqIndexedDataset(PEER_FAIRSEQ / "data-bin" / "test.en-de.en")
    lines = (PEER_FAIRSEQ / "test_2016_flickr.bpe.en").read_text(encoding="utf-8").splitlines()
    assert len(ds) == len(lines) == 1000
    for i in (0, 1, 500, 999):
        assert d.string(ds[i]) == " ".join(w if w in d else "<unk>" for w in lines[i].split())
        assert ds[i][-1] == d.eos() and len(ds[i]) == ds.sizes[i]


@peer
def test_data_conversion_is_lossless(tmp_path):
    from nmt.data.language_pair_dataset import load_language_pair
    from nmt.interop.fairseq_data import FairseqIndexedDataset

    out = tmp_path / "bin"
    assert run_cli(["data", "--path", str(PEER_FAIRSEQ / "data-bin"), "--output", str(out)]) == 0
    for split in ("test", "valid"):
        ours = load_language_pair(out, split, "en", "de")
        theirs = {lang: FairseqIndexedDataset(PEER_FAIRSEQ / "data-bin" / f"{split}.en-de.{lang}") for lang in
                  ("en", "de")}
        assert len(ours) == len(theirs["en"])
        for i in range(len(ours)):
            sample = ours[i]
            assert np.array_equal(sample["source"].numpy(), theirs["en"][i])
            assert np.array_equal(sample["target"].numpy(), theirs["de"][i])
    assert (out / "dict.de.txt").read_bytes() == (PEER_FAIRSEQ / "data-bin" / "dict.de.txt").read_bytes()
    # a second run with the same inputs is recognised; other data in --output is not overwritten silently
    assert run_cli(["data", "--path", str(PEER_FAIRSEQ / "data-bin"), "--output", str(out)]) == 0
    assert run_cli(["data", "--path", str(PEER_FAIRSEQ / "data-bin"), "--output", str(out), "--tokenizer",
                    "moses"]) == 2


def test_not_a_fairseq_index_is_refused(tmp_path):
    from nmt.errors import DataError
    from nmt.interop.fairseq_data import FairseqIndexedDataset

    (tmp_path / "x.idx").write_bytes(b"NMTIDX\x00\x00" + bytes(40))
    (tmp_path / "x.bin").write_bytes(b"")
    with pytest.raises(DataError, match="not a fairseq MMIDIDX"):
        FairseqIndexedDataset(tmp_path / "x")


def test_fairseq_positions_grow_past_the_table_and_keep_their_values():
    from nmt.plugin_loader import load_plugins
    from nmt.registry import POSITIONAL

    load_plugins()
    small, big = POSITIONAL.build("fairseq_sinusoidal", None, D, 4), POSITIONAL.build("fairseq_sinusoidal", None, D, 64)
    torch.testing.assert_close(small(10, offset=20), big(10, offset=20))  # grown on demand
    tokens = torch.tensor([[5, 6, 7, 8, 9]])  # the reference's positions of tokens 2..4 (fairseq's 4, 5, 6)
    expected = ref_positions(tokens, "encoder", tiny_args(), {})[0, 2:]
    torch.testing.assert_close(big(3, offset=2), expected)


def test_pre_0_10_key_names_import_the_same(tmp_path):
    """Old fairseq: q/k/v fused as in_proj_weight/bias, an untied output matrix named embed_out."""
    from nmt.generation.loading import load_model

    args = tiny_args(share_all_embeddings=False, share_decoder_input_output_embed=False)
    weights = tiny_weights(args)
    legacy = OrderedDict()
    for key, value in weights.items():
        m = re.fullmatch(r"(.*)\.q_proj\.(weight|bias)", key)
        if m:
            legacy[f"{m.group(1)}.in_proj_{m.group(2)}"] = torch.cat(
                [weights[f"{m.group(1)}.{x}_proj.{m.group(2)}"] for x in "qkv"])
        elif not re.fullmatch(r".*\.[kv]_proj\.(weight|bias)", key):
            legacy["decoder.embed_out" if key == "decoder.output_projection.weight" else key] = value
    code, out = import_tiny(tmp_path, args, legacy)
    assert code == 0
    d = Dictionary.load(tmp_path / "data" / "dict.en.txt")
    src, prev = torch.tensor([[5, 9, 7, 2]]), torch.tensor([[2, 12, 13]])
    with torch.no_grad():
        torch.testing.assert_close(load_model(str(out), d, d)(src, None, prev), ref_forward(weights, args, src, prev),
                                   atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("missing", ["encoder_embed_dim", "decoder_layers"])
def test_missing_model_options_are_one_line(tmp_path, capsys, missing):
    args = tiny_args()
    weights = tiny_weights(args)
    delattr(args, missing)
    code, out = import_tiny(tmp_path, args, weights)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and missing in err[0] and "KeyError" not in err[0], err
    assert not out.exists()


def test_interpolations_in_a_fairseq_config_are_never_resolved(tmp_path, capsys, monkeypatch):
    """A checkpoint's cfg is data: ``${oc.env:X}`` in it must not read (and echo) the environment."""
    from omegaconf import OmegaConf

    monkeypatch.setenv("NMT_TEST_SECRET", "hunter2")
    args = tiny_args()
    model = {k: v for k, v in vars(args).items()}
    model["encoder_embed_dim"] = "${oc.env:NMT_SECRET_NOT_SET,${oc.env:NMT_TEST_SECRET}}"
    model["activation_fn"] = "${oc.env:NMT_TEST_SECRET}"
    cfg = OmegaConf.create({"model": model})
    code, out = import_tiny(tmp_path, None, tiny_weights(args), extra={"cfg": cfg})
    out_text, err = capsys.readouterr()
    assert code != 0 and "hunter2" not in err + out_text and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
