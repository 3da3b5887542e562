"""--arch presets: the merge order defaults < preset < YAML < flags < key=value, that a big
arch really builds a big model, and the paper's parameter counts (Table 3)."""

from dataclasses import dataclass, field

import pytest
import torch

from nmt.config.loader import resolve_config
from nmt.config.model import ModelConfig, arch_preset
from nmt.errors import ConfigError
from nmt.models import build_model
from nmt.plugin_loader import load_plugins

load_plugins()


@dataclass
class Job:
    model: ModelConfig = field(default_factory=ModelConfig)


class SharedDict:
    """The paper's 37,000-token shared source-target vocabulary."""

    def __len__(self):
        return 37000

    def pad(self):
        return 1


def resolve(tmp_path=None, yaml_text=None, flags=None, overrides=()):
    yaml_file = None
    if yaml_text is not None:
        yaml_file = tmp_path / "cfg.yaml"
        yaml_file.write_text(yaml_text)
    return resolve_config(Job, yaml_file=yaml_file, flags=flags, overrides=overrides, preset=arch_preset).model


def test_layers_merge_in_order_defaults_preset_yaml_flags_overrides(tmp_path):
    assert resolve().encoder_embed_dim == 512 and resolve().dropout == 0.1
    big = resolve(flags={"model.arch": "transformer_big"})
    assert (big.encoder_embed_dim, big.decoder_attention_heads, big.dropout) == (1024, 16, 0.3)
    yaml_text = "model:\n  dropout: 0.25\n  encoder_layers: 4\n"
    m = resolve(tmp_path, yaml_text, flags={"model.arch": "transformer_big"})
    assert (m.dropout, m.encoder_layers, m.encoder_embed_dim) == (0.25, 4, 1024)
    m = resolve(tmp_path, yaml_text, flags={"model.arch": "transformer_big", "model.dropout": 0.2})
    assert (m.dropout, m.encoder_layers) == (0.2, 4)
    m = resolve(tmp_path, yaml_text, flags={"model.arch": "transformer_big", "model.dropout": 0.2},
                overrides=["model.dropout=0.15"])
    assert m.dropout == 0.15 and m.decoder_ffn_embed_dim == 4096


def test_arch_named_in_yaml_applies_its_preset(tmp_path):
    m = resolve(tmp_path, "model:\n  arch: transformer_small\n")
    assert (m.encoder_attention_heads, m.encoder_ffn_embed_dim, m.arch.name) == (4, 1024, "transformer_small")


def test_unknown_arch_is_a_config_error_with_a_suggestion():
    with pytest.raises(ConfigError, match='Did you mean "transformer_big"'):
        resolve(flags={"model.arch": "transformer_bigg"})


def expected_parameters(d: int, ff: int, layers: int, vocab: int) -> int:
    """Closed form for the post-norm model with all embeddings shared (one d x vocab matrix)."""
    attn = 4 * (d * d + d)
    ffn = 2 * d * ff + ff + d
    enc_layer = attn + ffn + 2 * 2 * d
    dec_layer = 2 * attn + ffn + 3 * 2 * d
    return layers * (enc_layer + dec_layer) + vocab * d


def build_meta(arch: str):
    cfg = resolve(flags={"model.arch": arch, "model.share_all_embeddings": True})
    with torch.device("meta"):  # shapes only: no memory, no init time
        return build_model(cfg, SharedDict(), SharedDict())


def test_transformer_big_really_builds_a_big_model_of_213M_parameters():
    model = build_meta("transformer_big")
    assert model.encoder.embed_tokens.weight.shape == (37000, 1024)
    assert model.decoder.layers[5].ffn.fc1.weight.shape == (4096, 1024)
    assert model.encoder.layers[0].self_attn.num_heads == 16
    n = sum(p.numel() for p in model.parameters())
    assert n == expected_parameters(1024, 4096, 6, 37000)
    assert abs(n - 213e6) / 213e6 < 0.02  # Table 3: 213M


def test_transformer_base_counts_63M_parameters_close_to_the_papers_65M():
    model = build_meta("transformer_base")
    n = sum(p.numel() for p in model.parameters())
    assert n == expected_parameters(512, 2048, 6, 37000)  # 63,082,496
    # Table 3 says 65M; no single vocabulary makes both 65M (base) and 213M (big) exact with this
    # architecture (base needs ~40.7k tokens, big ~35.8k), so base is 3% below the paper.
    assert abs(n - 65e6) / 65e6 < 0.03


def test_tiny_and_small_presets_build():
    for arch, dim in (("transformer_tiny", 64), ("transformer_small", 512)):
        assert build_meta(arch).encoder.embed_tokens.embedding_dim == dim
