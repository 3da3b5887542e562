"""The CTranslate2 export (nmt/interop/ctranslate2_export.py): CTranslate2 running the exported
folder finds nmt's greedy translations token for token and gives nmt's per-token log-probabilities,
for every layout the exporter maps (post-/pre-norm, the three position tables or relative-position
self-attention, shared/tied/separate embeddings, relu/gelu, scaled or not, decoding from <s> or </s>);
what it cannot run is refused in one line with nothing written; the folder appears whole or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nmt.config.generate import GenerationConfig
from nmt.data.dictionary import Dictionary
from nmt.errors import ConfigError, UsageError
from nmt.generation.ensemble import EnsembleModel
from nmt.generation.inference import decoder_start, pad_batch
from nmt.generation.search import Hypothesis, build_search
from nmt.interop.ctranslate2_export import export_ctranslate2, suppressed_symbols
from nmt.models import build_model
from nmt.plugin_loader import load_plugins

ctranslate2 = pytest.importorskip("ctranslate2")
load_plugins()
torch.set_num_threads(1)

MAX_LEN = 24  # tokens generated before the forced </s>
SHAPE = dict(encoder_embed_dim=32, decoder_embed_dim=32, encoder_ffn_embed_dim=64, decoder_ffn_embed_dim=64,
             encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=2,
             max_source_positions=48, max_target_positions=40)


def dictionary(n: int, prefix: str) -> Dictionary:
    d = Dictionary()
    for i in range(n):
        d.add_symbol(f"{prefix}{i}", 10)
    return d


def tiny_model(seed: int = 0, shared: bool = False, **options) -> tuple[torch.nn.Module, Dictionary, Dictionary]:
    """A random model whose LayerNorms are random too (an export that mixes them up must show)."""
    torch.manual_seed(seed)
    src = dictionary(20, "w")
    tgt = src if shared else dictionary(27, "v")
    model = build_model({**SHAPE, "share_all_embeddings": shared, **options}, src, tgt).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.normal_(1.0, 0.3)
                m.bias.normal_(0.0, 0.3)
    return model, src, tgt


def sentences(seed: int = 0, count: int = 12) -> list[list[str]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 14, (count,), generator=g).tolist()
    return [[f"w{int(i)}" for i in torch.randint(0, 20, (n,), generator=g)] for n in lengths]


def nmt_greedy(model: torch.nn.Module, src: Dictionary, tgt: Dictionary, sents: list[list[str]]) -> list[Hypothesis]:
    ens = EnsembleModel([model])
    search = build_search(GenerationConfig(beam=1, max_len_b=MAX_LEN), tgt, decoder_start=decoder_start(ens, tgt))
    src_tokens, src_lengths = pad_batch([src.encode_line(" ".join(s)) for s in sents], src.pad())
    with torch.inference_mode():
        return [row[0] for row in search.search(ens, src_tokens, src_lengths)]


def ct2_greedy(folder: Path, model: torch.nn.Module, sents: list[list[str]]) -> list[list[str]]:
    translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=1)
    results = translator.translate_batch([s + ["</s>"] for s in sents], beam_size=1, max_decoding_length=MAX_LEN,
                                         suppress_sequences=suppressed_symbols(model.cfg.decoder_start))
    return [r.hypotheses[0] for r in results]


def ct2_log_probs(folder: Path, sents: list[list[str]], targets: list[list[str]]) -> list[list[float]]:
    """CTranslate2's log-probability of each target token and of the closing </s>."""
    translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=1)
    return [r.log_probs for r in translator.score_batch([s + ["</s>"] for s in sents], targets)]


def words(hyp: Hypothesis, tgt: Dictionary) -> list[str]:
    ids = hyp.tokens.tolist()
    return [tgt[i] for i in (ids[:-1] if ids[-1] == tgt.eos() else ids)]


def raise_eos(model: torch.nn.Module, tgt: Dictionary, offset: float) -> None:
    """Add ``offset`` to the logit of </s> at every step. Feature 0 of the decoder's output is made a
    constant 1 (its last LayerNorm's gain 0, bias 1), so the output row of </s> at 0 acts as a bias."""
    last = model.decoder.final_norm or model.decoder.layers[-1].ffn_res.norm
    with torch.no_grad():
        last.weight[0], last.bias[0] = 0.0, 1.0
        model.decoder.output_weight[tgt.eos(), 0] = offset


def stopping_early(model: torch.nn.Module, src: Dictionary, tgt: Dictionary, sents: list[list[str]]) -> None:
    """Raise </s> by the smallest offset with which nmt stops at least 3 sentences early, one of them
    after several tokens: a random model otherwise runs to the length limit every time."""
    for offset in (i / 8 for i in range(160)):
        raise_eos(model, tgt, offset)
        lengths = [len(h.tokens) for h in nmt_greedy(model, src, tgt, sents)]
        if sum(n <= MAX_LEN for n in lengths) >= 3 and any(2 < n <= MAX_LEN for n in lengths):
            return
    raise AssertionError(f"no </s> offset stops 3 sentences early ({lengths}); change the seed")


def assert_same_as_nmt(model: torch.nn.Module, src: Dictionary, tgt: Dictionary, folder: Path,
                       sents: list[list[str]]) -> list[Hypothesis]:
    hyps = nmt_greedy(model, src, tgt, sents)
    ours = [words(h, tgt) for h in hyps]
    assert ct2_greedy(folder, model, sents) == ours
    for theirs, hyp in zip(ct2_log_probs(folder, sents, ours), hyps):
        assert theirs == pytest.approx(hyp.positional_scores.tolist(), abs=1e-4)
    return hyps


LAYOUTS = {
    "post-norm": {},
    "pre-norm": {"encoder_normalize_before": True, "decoder_normalize_before": True},
    "pre-norm encoder, post-norm decoder": {"encoder_normalize_before": True},
    "learned": {"positional": {"name": "learned"}},
    "learned encoder, sinusoidal decoder": {"encoder_positional": {"name": "learned"}},
    "learned, pre-norm decoder": {"positional": {"name": "learned"}, "decoder_normalize_before": True},
    "fairseq-imported": {"positional": {"name": "fairseq_sinusoidal"}, "decoder_start": "</s>", "shared": True},
    "starts from </s>": {"decoder_start": "</s>"},
    "shared embeddings": {"shared": True},
    "tied output": {"share_decoder_input_output_embed": True},
    "gelu, unscaled embeddings": {"activation_fn": "gelu", "no_scale_embedding": True},
    # Shaw et al.'s relative positions, CTranslate2's relative_position: k 3 and 2 clip within these sentences
    "relative, no absolute positions": {"attention": {"name": "relative"}, "positional": {"name": "none"}},
    "relative encoder (k 3), sinusoidal decoder": {
        "encoder_attention": {"name": "relative", "max_relative_position": 3}, "encoder_positional": {"name": "none"}},
    "relative pre-norm decoder (k 2), shared": {"decoder_attention": {"name": "relative", "max_relative_position": 2},
                                                "decoder_positional": {"name": "none"},
                                                "decoder_normalize_before": True, "shared": True},
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_greedy_translations_and_log_probs_equal_nmt(layout, tmp_path):
    options = dict(LAYOUTS[layout])
    model, src, tgt = tiny_model(seed=len(layout), shared=options.pop("shared", False), **options)
    sents = sentences(seed=len(layout))
    stopping_early(model, src, tgt, sents)
    folder = export_ctranslate2(model, src, tgt, tmp_path / "ct2")
    assert_same_as_nmt(model, src, tgt, folder, sents)


@pytest.mark.parametrize("layout", ["post-norm", "fairseq-imported"])
def test_translations_that_reach_the_length_limit_are_cut_at_the_same_token(layout, tmp_path):
    options = dict(LAYOUTS[layout])
    model, src, tgt = tiny_model(seed=7, shared=options.pop("shared", False), **options)
    sents = sentences(seed=7)
    hyps = assert_same_as_nmt(model, src, tgt, export_ctranslate2(model, src, tgt, tmp_path / "ct2"), sents)
    assert sum(len(h.tokens) == MAX_LEN + 1 for h in hyps) >= 3  # MAX_LEN tokens, then the forced </s>


@pytest.mark.parametrize("start", ["<s>", "</s>"])
def test_end_of_sentence_waits_for_one_token_in_both(start, tmp_path):
    """</s> is the likeliest token at every step: nmt (--min-len 1) and CTranslate2 both give one token."""
    model, src, tgt = tiny_model(seed=3, decoder_start=start)
    raise_eos(model, tgt, 100.0)
    sents = sentences(seed=3)
    hyps = assert_same_as_nmt(model, src, tgt, export_ctranslate2(model, src, tgt, tmp_path / "ct2"), sents)
    assert all(len(h.tokens) == 2 for h in hyps)


def test_folder_holds_the_vocabularies_in_id_order_and_nmt_special_symbols(tmp_path):
    import json

    model, src, tgt = tiny_model(decoder_start="</s>")
    folder = export_ctranslate2(model, src, tgt, tmp_path / "ct2")
    assert json.loads((folder / "source_vocabulary.json").read_text()) == src.symbols
    assert json.loads((folder / "target_vocabulary.json").read_text()) == tgt.symbols
    config = json.loads((folder / "config.json").read_text())
    assert (config["decoder_start_token"], config["eos_token"], config["unk_token"]) == ("</s>", "</s>", "<unk>")
    assert not config["add_source_eos"] and not config["add_source_bos"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct2"]  # no work folder left beside it


REFUSED = [
    ({"attention": {"name": "restricted"}}, "encoder self-attention is 'restricted'"),
    ({"decoder_attention": {"name": "relative"}},
     "decoder positional encoding is 'sinusoidal', which CTranslate2 cannot run beside relative-position"),
    ({"cross_attention": {"name": "additive"}}, "encoder-decoder attention is 'additive'"),
    ({"decoder_positional": {"name": "none"}}, "decoder positional encoding is 'none'"),
]


@pytest.mark.parametrize("options,what", REFUSED, ids=[what for _, what in REFUSED])
def test_what_ctranslate2_cannot_run_is_refused_in_one_line_with_nothing_written(options, what, tmp_path):
    model, src, tgt = tiny_model(**options)
    with pytest.raises(ConfigError) as e:
        export_ctranslate2(model, src, tgt, tmp_path / "out" / "ct2")
    message = str(e.value)
    assert what in message and "CTranslate2 cannot run" in message and "\n" not in message
    assert message.startswith("nmt-export --format ctranslate2: ")
    assert list(tmp_path.iterdir()) == []


def test_a_plugin_of_the_users_own_is_refused_by_name(tmp_path):
    """Even one that computes what scaled_dot_product does: the exporter cannot know that."""
    from nmt.plugins.attention.scaled_dot_product import ScaledDotProductAttention
    from nmt.registry import register_attention

    register_attention("my_attention")(type("MyAttention", (ScaledDotProductAttention,), {}))
    model, src, tgt = tiny_model(decoder_attention={"name": "my_attention"})
    with pytest.raises(ConfigError, match="decoder self-attention is 'my_attention'.*scaled_dot_product"):
        export_ctranslate2(model, src, tgt, tmp_path / "ct2")
    assert list(tmp_path.iterdir()) == []


def test_other_modules_and_other_dictionaries_are_refused(tmp_path):
    model, src, tgt = tiny_model()
    with pytest.raises(ConfigError, match="a Linear, not nmt's TransformerModel"):
        export_ctranslate2(torch.nn.Linear(2, 2), src, tgt, tmp_path / "ct2")
    with pytest.raises(UsageError, match="target dictionary has 32 symbols but the model's target embedding 31"):
        export_ctranslate2(model, src, dictionary(28, "x"), tmp_path / "ct2")
    assert list(tmp_path.iterdir()) == []


def test_a_non_empty_folder_or_a_file_is_refused_and_an_empty_folder_filled(tmp_path):
    model, src, tgt = tiny_model()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    (tmp_path / "file").write_text("mine")
    for name, why in (("full", "is not empty"), ("file", "is not a folder")):
        with pytest.raises(UsageError, match=why):
            export_ctranslate2(model, src, tgt, tmp_path / name)
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine" and (tmp_path / "file").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    export_ctranslate2(model, src, tgt, tmp_path / "empty")
    assert ctranslate2.contains_model(str(tmp_path / "empty"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "file", "full"]


def test_a_failure_while_saving_leaves_nothing(tmp_path, monkeypatch):
    from ctranslate2.specs import transformer_spec

    def half_save(self, output_dir):
        (Path(output_dir) / "model.bin").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(transformer_spec.TransformerSpec, "save", half_save)
    model, src, tgt = tiny_model()
    with pytest.raises(KeyboardInterrupt):
        export_ctranslate2(model, src, tgt, tmp_path / "new" / "folders" / "ct2")
    assert list(tmp_path.iterdir()) == []  # neither the work folder nor the parents it made


def test_an_unwritable_place_is_one_line(tmp_path):
    model, src, tgt = tiny_model()
    (tmp_path / "file").write_text("mine")
    with pytest.raises(UsageError, match="cannot write .*file/ct2") as e:
        export_ctranslate2(model, src, tgt, tmp_path / "file" / "ct2")
    assert "\n" not in str(e.value) and (tmp_path / "file").read_text() == "mine"


def test_quantized_folders_load_and_translate_and_an_unknown_type_is_refused(tmp_path):
    model, src, tgt = tiny_model()
    sents = sentences()
    full = export_ctranslate2(model, src, tgt, tmp_path / "fp32")
    int8 = export_ctranslate2(model, src, tgt, tmp_path / "int8", quantization="int8")
    assert (int8 / "model.bin").stat().st_size < (full / "model.bin").stat().st_size / 2
    hyps = ct2_greedy(int8, model, sents)
    assert len(hyps) == len(sents) and all(set(h) <= set(tgt.symbols) for h in hyps)
    with pytest.raises(ConfigError, match="quantization 'int4' is not one of CTranslate2's"):
        export_ctranslate2(model, src, tgt, tmp_path / "int4", quantization="int4")
    assert not (tmp_path / "int4").exists()


def test_a_bf16_model_is_exported_in_float32(tmp_path):
    """nmt-generate --bf16 casts the weights; an export of such a model still loads and translates."""
    model, src, tgt = tiny_model()
    folder = export_ctranslate2(model.to(torch.bfloat16), src, tgt, tmp_path / "ct2")
    assert len(ct2_greedy(folder, model, sentences())) == 12


def test_nmt_export_format_ctranslate2_from_a_checkpoint_and_from_a_model_folder(exported_model, tmp_path):
    """The command: checkpoint + data-bin, or a model folder alone; CTranslate2 then translates the test split
    as nmt-generate --beam 1 does."""
    import re

    from model_folder_setup import export
    from nmt.cli.generate import main as generate_main
    from test_generate_setup import call_cli

    m = exported_model
    from_checkpoint, from_folder = tmp_path / "ct2-ckpt", tmp_path / "ct2-folder"
    assert export(m.data, "--path", m.pair[-1], "--format", "ctranslate2", "--output", from_checkpoint) == 0
    assert export("--path", m.folder, "--format", "ctranslate2", "--output", from_folder) == 0
    assert export(m.data, "--path", m.pair[-1], "--format", "ctranslate2", "--output", tmp_path / "x",
                  "--force") == 2
    capture = tmp_path / "gen"
    assert call_cli(generate_main, [m.data, "--path", m.pair[-1], "--beam", "1", "--threads", "1",
                                    "--results-path", capture]) == 0
    out = (capture / "generate-test.txt").read_text(encoding="utf-8")
    sources = dict(re.findall(r"^S-(\d+)\t(.*)$", out, re.M))
    best = dict(re.findall(r"^H-(\d+)\t\S+\t(.*)$", out, re.M))
    ids = sorted(sources, key=int)
    for folder in (from_checkpoint, from_folder):
        translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=1)
        found = translator.translate_batch([sources[i].split() + ["</s>"] for i in ids], beam_size=1,
                                           max_decoding_length=200, suppress_sequences=suppressed_symbols("<s>"))
        assert [" ".join(r.hypotheses[0]) for r in found] == [best[i] for i in ids]
