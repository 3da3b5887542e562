"""A user's attention plugin in a --user-dir folder builds and trains a tiny model with no
change to nmt itself (later: the same through nmt-train --user-dir)."""

import textwrap

import torch
import torch.nn.functional as F

from nmt.models import build_model
from nmt.plugin_loader import import_user_dir, load_plugins

PLUGIN = textwrap.dedent('''
    """Multiplicative (Luong "general") attention: score(q, k) = q^T W k, one W per head."""
    import torch
    from torch import nn

    from nmt.models.attention import AttentionBase, allowed_mask, softmax_attention
    from nmt.registry import register_attention


    @register_attention("multiplicative")
    class MultiplicativeAttention(AttentionBase):
        def __init__(self, embed_dim, num_heads, **kwargs):
            super().__init__(embed_dim, num_heads, **kwargs)
            self.bilinear = nn.Parameter(torch.eye(self.head_dim).repeat(num_heads, 1, 1))  # (H, D, D)

        def attend(self, q, k, v, key_padding_mask, causal, need_weights):
            scores = (q @ self.bilinear) @ k.transpose(-2, -1)  # (B, H, T, S)
            mask = allowed_mask(q.size(2), k.size(2), key_padding_mask, causal, q.device)
            out, weights = softmax_attention(scores, v, mask, self.dropout, self.training)
            return out, (weights if need_weights else None)
''')


class Dict:
    def __len__(self):
        return 16

    def pad(self):
        return 1


def test_user_attention_plugin_trains_a_tiny_model(tmp_path):
    (tmp_path / "multiplicative.py").write_text(PLUGIN)
    load_plugins()
    import_user_dir(tmp_path)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = build_model({"arch": "transformer_tiny", "encoder_embed_dim": 32, "decoder_embed_dim": 32,
                         "encoder_ffn_embed_dim": 64, "decoder_ffn_embed_dim": 64, "dropout": 0.0,
                         "attention": "multiplicative", "share_all_embeddings": True}, Dict(), Dict())
    assert set(model.plugin_names().values()) >= {"multiplicative"}
    src = torch.randint(4, 16, (8, 6))
    target = src.clone()  # copy task
    prev = torch.cat([torch.zeros(8, 1, dtype=torch.long), target[:, :-1]], dim=1)
    bilinear = model.decoder.layers[0].cross_attn.bilinear
    start = bilinear.detach().clone()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        logits = model(src, None, prev)
        loss = F.cross_entropy(logits.reshape(-1, 16), target.reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert not torch.equal(bilinear, start)  # the plugin's own parameter is trained
