"""Linear products on bucketed row counts under CPU bf16 autocast (nmt/cpu_speed/linear.py): the buckets,
the shapes the products really get, results equal to F.linear's, and a model's loss and gradients
unchanged by it; packed weights for inference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import nmt.cpu_speed.linear as bucketed
from fake_dictionary import FakeDict
from nmt.cpu_speed import swap_layers
from nmt.cpu_speed.linear import BucketedLinear, bucket_rows, linear
from nmt.models import build_model
from nmt.plugin_loader import load_plugins

load_plugins()


def test_a_bucket_holds_the_rows_with_at_most_a_sixteenth_more():
    buckets = [bucket_rows(n) for n in range(1, 20_000)]
    for n, b in enumerate(buckets, start=1):
        assert b >= n
        assert b == n if n <= 32 else (b - n) * 16 < n
    assert buckets == sorted(buckets)
    assert len({bucket_rows(n) for n in range(2048, 4097)}) == 17  # 16 per octave, and 4096 itself
    assert bucket_rows(3696) == 3712 and bucket_rows(4096) == 4096


@pytest.fixture
def product_shapes(monkeypatch):
    """The (left, right) shapes of every torch.mm / torch.addmm call."""
    shapes = []
    mm, addmm = torch.mm, torch.addmm

    def spy_mm(a, b):
        shapes.append((tuple(a.shape), tuple(b.shape)))
        return mm(a, b)

    def spy_addmm(bias, a, b):
        shapes.append((tuple(a.shape), tuple(b.shape)))
        return addmm(bias, a, b)

    monkeypatch.setattr(torch, "mm", spy_mm)
    monkeypatch.setattr(torch, "addmm", spy_addmm)
    return shapes


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16])
def test_under_bf16_autocast_every_product_has_the_bucketed_row_count(product_shapes, bias, x_dtype):
    x = torch.randn(7, 53, 24, dtype=x_dtype, requires_grad=True)  # 371 rows -> 384
    layer = BucketedLinear(24, 40, bias=bias)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.shape == (7, 53, 40) and y.dtype == torch.bfloat16
    y.float().square().sum().backward()
    assert product_shapes == [((384, 24), (24, 40)), ((384, 40), (40, 24)), ((40, 384), (384, 24))]
    assert x.grad.dtype == x_dtype and layer.weight.grad.dtype == torch.float32


def test_in_fp32_or_on_a_bucket_size_it_is_f_linear(product_shapes):
    layer = BucketedLinear(8, 4)
    layer(torch.randn(371, 8))  # fp32: no bucketing
    with torch.autocast("cpu", dtype=torch.bfloat16):
        layer(torch.randn(384, 8))  # already a bucket size
    assert product_shapes == []


def test_bf16_weights_without_autocast_are_bucketed_too(product_shapes):
    """nmt-generate --bf16 casts the weights instead of using autocast."""
    layer = BucketedLinear(16, 12)
    x = torch.randn(2, 185, 16)  # 370 rows -> 384
    expected = F.linear(x.bfloat16(), layer.weight.bfloat16(), layer.bias.bfloat16())
    layer.to(torch.bfloat16)
    with torch.inference_mode():
        y = layer(x.bfloat16())
    assert product_shapes == [((384, 16), (16, 12))]
    assert y.shape == (2, 185, 12) and y.dtype == torch.bfloat16
    torch.testing.assert_close(y, expected)


@pytest.mark.parametrize("rows", [5, 371, 384, 1000])
def test_results_and_gradients_equal_f_linear_under_autocast(rows):
    torch.manual_seed(rows)
    x = torch.randn(rows, 32, requires_grad=True)
    w = torch.randn(48, 32, requires_grad=True)
    b = torch.randn(48, requires_grad=True)
    g = torch.randn(rows, 48)
    outs = []
    for fn in (F.linear, linear):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = fn(x, w, b)
        (y.float() * g).sum().backward()
        outs.append([y.float(), x.grad, w.grad, b.grad])
        x.grad = w.grad = b.grad = None
    for ours, theirs in zip(outs[1], outs[0]):
        torch.testing.assert_close(ours, theirs, rtol=1e-2, atol=1e-2)


def test_a_models_bf16_loss_and_gradients_do_not_change(monkeypatch):
    cfg = dict(encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_layers=2, encoder_attention_heads=2,
               decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=2,
               dropout=0.0, max_source_positions=64, max_target_positions=64)
    g = torch.Generator().manual_seed(3)
    src, prev = torch.randint(4, 50, (6, 11), generator=g), torch.randint(4, 50, (6, 13), generator=g)  # 66, 78 rows

    def loss_and_grads():
        torch.manual_seed(0)
        model = swap_layers(build_model(cfg, FakeDict(50), FakeDict(50)).train())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(src, None, prev)  # (B, T, V)
        loss = F.cross_entropy(logits.float().flatten(0, 1), prev.flatten())
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    monkeypatch.setattr(bucketed, "bucket_rows", lambda n: n)
    loss_plain, grads_plain = loss_and_grads()
    monkeypatch.undo()
    loss_bucketed, grads_bucketed = loss_and_grads()
    torch.testing.assert_close(loss_bucketed, loss_plain, rtol=1e-3, atol=1e-3)
    for name, grad in grads_plain.items():
        torch.testing.assert_close(grads_bucketed[name], grad, rtol=0.05, atol=2e-3, msg=name)


def test_a_bucketed_layer_shares_a_plain_layers_parameters_and_mode():
    torch.manual_seed(0)
    plain = torch.nn.Linear(6, 3).eval()
    rng = torch.get_rng_state()
    layer = BucketedLinear.sharing(plain)
    assert torch.equal(torch.get_rng_state(), rng)  # built on the meta device: no random draw
    assert layer.weight is plain.weight and layer.bias is plain.bias and not layer.training
    x = torch.randn(4, 6)
    assert torch.equal(layer(x), plain(x))
    assert BucketedLinear.sharing(torch.nn.Linear(6, 3, bias=False)).bias is None


needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN")


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 5, 33, 100, 640])
def test_packed_bf16_weights_give_f_linears_results_bit_for_bit(rows, bias):
    torch.manual_seed(rows)
    layer = BucketedLinear(64, 48, bias=bias).to(torch.bfloat16)
    x = torch.randn(rows, 64).to(torch.bfloat16)
    with torch.inference_mode():
        plain = layer(x)
        assert layer.pack()
        packed = layer(x)
        batched = layer(x.view(1, rows, 64))  # leading dimensions are kept
    assert torch.equal(packed, plain)
    assert batched.shape == (1, rows, 48) and torch.equal(batched[0], plain)


@needs_onednn
@pytest.mark.parametrize("rows", [1, 5, 33, 640])
def test_packed_fp32_weights_give_f_linears_results_to_the_last_bits(rows):
    """fp32 packs too (oneDNN's fp32 kernels: the same products up to rounding, not bit for bit as in bf16)."""
    torch.manual_seed(rows)
    layer = BucketedLinear(64, 48)
    x = torch.randn(rows, 64)
    with torch.inference_mode():
        plain = layer(x)
        assert layer.pack()
        packed = layer(x)
    assert layer.packed is not None and packed.dtype is torch.float32
    assert layer.packed.is_mkldnn  # oneDNN's layout (the products below would also agree on F.linear)
    torch.testing.assert_close(packed, plain, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_packed_weights_serve_inference_only():
    layer = BucketedLinear(16, 8).to(torch.bfloat16)
    assert layer.pack()
    x = torch.randn(5, 16).to(torch.bfloat16)
    layer(x).float().sum().backward()  # gradients enabled: the layer's own weight, which autograd can follow
    assert layer.weight.grad is not None
    assert BucketedLinear(16, 8).to(torch.float16).pack() is False  # fp16 weights are not packed


@needs_onednn
def test_a_packed_bf16_model_decodes_the_same_with_the_same_state_dict():
    from nmt.cpu_speed.apply import pack_layers
    from nmt.cpu_speed.linear import PackedProjection

    cfg = dict(encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_layers=2, encoder_attention_heads=2,
               decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=2,
               dropout=0.0, max_source_positions=64, max_target_positions=64)
    torch.manual_seed(0)
    model = swap_layers(build_model(cfg, FakeDict(50), FakeDict(50)).eval()).to(torch.bfloat16)
    g = torch.Generator().manual_seed(3)
    src, prev = torch.randint(4, 50, (3, 7), generator=g), torch.randint(4, 50, (3, 9), generator=g)
    keys = set(model.state_dict())
    with torch.inference_mode():
        plain = model(src, None, prev)
        pack_layers(model)
        packed = model(src, None, prev)
    assert isinstance(model.decoder.output_projection, PackedProjection)
    assert sum(isinstance(m, BucketedLinear) and m.packed is not None for m in model.modules()) > 0
    assert set(model.state_dict()) == keys
    assert torch.equal(packed, plain)
