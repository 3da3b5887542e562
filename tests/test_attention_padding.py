"""The explicit attention's lengths padded to a multiple of 4 in CPU bf16 training (nmt/models/attention.py
``explicit_attention``): which calls pad, and that padding changes no output or gradient."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fake_dictionary import FakeDict
from nmt.models import attention, build_model
from nmt.models.attention import explicit_attention
from nmt.plugin_loader import load_plugins

load_plugins()


@pytest.fixture
def score_shapes(monkeypatch):
    """The (B, H, T, S) shape of every score tensor the explicit attention computes."""
    shapes = []
    real = attention.softmax_attention

    def spy(scores, *args):
        shapes.append(tuple(scores.shape))
        return real(scores, *args)

    monkeypatch.setattr(attention, "softmax_attention", spy)
    return shapes


def qkv(T: int, S: int, dtype: torch.dtype, requires_grad: bool) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(T * 100 + S)
    return [torch.randn(3, 2, n, 8, generator=g).to(dtype).requires_grad_(requires_grad) for n in (T, S, S)]


def padding_mask(S: int) -> torch.Tensor:
    mask = torch.zeros(3, S, dtype=torch.bool)  # (B, S) True at pads
    mask[1, S - 2:] = True
    return mask


@pytest.mark.parametrize("T,S,causal,masked", [(7, 7, True, False), (7, 7, True, True), (5, 9, False, True),
                                               (6, 11, False, False), (8, 8, False, False)])
def test_bf16_training_pads_to_multiples_of_four_and_changes_nothing(score_shapes, monkeypatch, T, S, causal, masked):
    mask = padding_mask(S) if masked else None

    def run():
        q, k, v = qkv(T, S, torch.bfloat16, requires_grad=True)
        out, weights = explicit_attention(q, k, v, mask, causal, 8 ** -0.5, 0.0, True)
        (out.float() * torch.arange(out.numel()).view_as(out).cos()).sum().backward()
        return [out.float(), weights.float(), q.grad.float(), k.grad.float(), v.grad.float()]

    padded = run()
    assert score_shapes[-1] == (3, 2, -(-T // 4) * 4, -(-S // 4) * 4)
    assert padded[0].shape == (3, 2, T, 8) and padded[1].shape == (3, 2, T, S)
    monkeypatch.setattr(attention, "LENGTH_MULTIPLE", 1)
    exact = run()
    assert score_shapes[-1] == (3, 2, T, S)
    for ours, theirs in zip(padded, exact):
        torch.testing.assert_close(ours, theirs, rtol=1e-2, atol=1e-2)
    if masked:  # a padded key gets no weight, padded or not
        assert padded[1][1, :, :, S - 2:].abs().max() == 0


@pytest.mark.parametrize("dtype,grad", [(torch.float32, True), (torch.bfloat16, False)])
def test_fp32_and_inference_keep_their_lengths(score_shapes, dtype, grad):
    q, k, v = qkv(5, 9, dtype, requires_grad=grad)
    with torch.set_grad_enabled(grad):
        explicit_attention(q, k, v, None, False, 8 ** -0.5, 0.0, grad)
    assert score_shapes == [(3, 2, 5, 9)]


def test_a_models_bf16_loss_and_gradients_do_not_change(monkeypatch):
    cfg = dict(encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_layers=2, encoder_attention_heads=2,
               decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=2,
               dropout=0.0, max_source_positions=64, max_target_positions=64)
    g = torch.Generator().manual_seed(5)
    src, prev = torch.randint(4, 50, (4, 9), generator=g), torch.randint(4, 50, (4, 11), generator=g)
    src[2, 6:] = 1  # padding (FakeDict's pad is 1): the encoder's and the cross-attention's key masks
    prev[3, 8:] = 1

    def loss_and_grads():
        torch.manual_seed(0)
        model = build_model(cfg, FakeDict(50), FakeDict(50)).train()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(src, None, prev)  # (B, T, V)
        loss = F.cross_entropy(logits.float().flatten(0, 1), prev.flatten(), ignore_index=1)
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    loss_padded, grads_padded = loss_and_grads()
    monkeypatch.setattr(attention, "LENGTH_MULTIPLE", 1)
    loss_exact, grads_exact = loss_and_grads()
    torch.testing.assert_close(loss_padded, loss_exact, rtol=1e-3, atol=1e-3)
    for name, grad in grads_exact.items():
        torch.testing.assert_close(grads_padded[name], grad, rtol=0.05, atol=2e-3, msg=name)
