"""The label-smoothed loss that projects the decoder's features itself, in blocks of rows (CPU bf16/fp16
training): the same loss, nll and gradients as projecting then taking the loss, with the nll's own gradient
term, padded blocks that add nothing, and the plain path wherever it does not apply."""

import pytest
import torch

import nmt.training.criterion as criterion_module
from nmt.cpu_speed.linear import linear
from nmt.models.build import build_model
from nmt.plugin_loader import load_plugins
from nmt.training.criterion import build_criterion, label_smoothed_nll_loss, projected_label_smoothed_nll_loss

V, C, PAD = 50, 16, 1
torch.set_num_threads(1)
load_plugins()


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 16 rows and softmax chunks of 5, so a few dozen rows take several of each and a padded last block."""
    monkeypatch.setattr(criterion_module, "_PROJECTION_CHUNK_ELEMENTS", 16 * V)
    monkeypatch.setattr(criterion_module, "_CHUNK_ELEMENTS", 5 * V)


def inputs(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(n, C, generator=g).requires_grad_()
    weight = (torch.randn(V, C, generator=g) * 0.3).requires_grad_()
    target = torch.randint(0, V, (n,), generator=g)
    return features, weight, target


def loss_and_grads(fn, features, weight, target, eps, nll_weight=0.0, dtype=torch.bfloat16, loss_weight=1.0):
    features.grad = weight.grad = None
    low = dtype is not torch.float32
    with torch.autocast("cpu", dtype=dtype if low else torch.bfloat16, enabled=low):
        loss, nll = fn(features, weight, target, eps)
    (loss_weight * loss + nll_weight * nll).backward()
    return loss.detach(), nll.detach(), features.grad.clone(), weight.grad.clone()


def project_then_loss(features, weight, target, eps):
    return label_smoothed_nll_loss(linear(features, weight), target, eps)


def assert_same(got, want):
    loss, nll, grad_features, grad_weight = got
    loss_r, nll_r, grad_features_r, grad_weight_r = want
    torch.testing.assert_close(loss, loss_r, rtol=2e-3, atol=1e-3)
    torch.testing.assert_close(nll, nll_r, rtol=2e-3, atol=1e-3)
    torch.testing.assert_close(grad_features, grad_features_r, rtol=2e-2, atol=2e-2)  # bf16 products
    torch.testing.assert_close(grad_weight, grad_weight_r, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("rows", [3, 16, 41])  # less than a block, one block, two blocks and a padded third
def test_the_same_loss_and_gradients_as_projecting_first(small_blocks, eps, rows):
    features, weight, target = inputs(rows)
    want = loss_and_grads(project_then_loss, features, weight, target, eps)
    got = loss_and_grads(projected_label_smoothed_nll_loss, features, weight, target, eps)
    assert got[0].dtype == torch.float32
    assert_same(got, want)


@pytest.mark.parametrize("nll_weight", [0.5, -2.0])
def test_the_nll_gradient_term_when_the_nll_is_back_propagated(small_blocks, nll_weight):
    features, weight, target = inputs(41, seed=1)
    want = loss_and_grads(project_then_loss, features, weight, target, 0.1, nll_weight)
    got = loss_and_grads(projected_label_smoothed_nll_loss, features, weight, target, 0.1, nll_weight)
    assert_same(got, want)


def test_a_scaled_loss_scales_the_gradients(small_blocks):
    """A loss scaler (fp16) or a trainer that back-propagates loss / n: the saved gradients are scaled."""
    features, weight, target = inputs(41, seed=4)
    want = loss_and_grads(project_then_loss, features, weight, target, 0.1, loss_weight=1024.0)
    got = loss_and_grads(projected_label_smoothed_nll_loss, features, weight, target, 0.1, loss_weight=1024.0)
    torch.testing.assert_close(got[2], want[2], rtol=2e-2, atol=20.0)
    torch.testing.assert_close(got[3], want[3], rtol=2e-2, atol=20.0)
    assert got[2].abs().max() > 100  # really scaled


def test_fp16_autocast_takes_the_blocks_too(small_blocks):
    features, weight, target = inputs(41, seed=2)
    want = loss_and_grads(project_then_loss, features, weight, target, 0.1, dtype=torch.float16)
    got = loss_and_grads(projected_label_smoothed_nll_loss, features, weight, target, 0.1, dtype=torch.float16)
    assert_same(got, want)


def test_blocks_run_on_few_row_counts_and_the_padding_adds_nothing(monkeypatch):
    """109 rows in blocks of 64: 64, then 45 rows padded to 48, a multiple of a quarter block."""
    monkeypatch.setattr(criterion_module, "_PROJECTION_CHUNK_ELEMENTS", 64 * V)
    shapes = []
    real_mm = torch.mm

    def spy(a, b):
        shapes.append((tuple(a.shape), tuple(b.shape)))
        return real_mm(a, b)

    features, weight, target = inputs(109, seed=3)
    monkeypatch.setattr(torch, "mm", spy)
    got = loss_and_grads(projected_label_smoothed_nll_loss, features, weight, target, 0.1)
    monkeypatch.setattr(torch, "mm", real_mm)
    forward = [a for a, b in shapes if b == (C, V)]  # the logits' products
    assert forward == [(64, C), (48, C)]
    want = loss_and_grads(project_then_loss, features, weight, target, 0.1)
    assert_same(got, want)


def test_fp32_and_evaluation_take_the_plain_path(monkeypatch):
    features, weight, target = inputs(20)

    def refuse(*args):
        raise AssertionError("the blocked loss ran")

    monkeypatch.setattr(criterion_module._ProjectedLabelSmoothedNLL, "apply", refuse)
    got = loss_and_grads(projected_label_smoothed_nll_loss, features, weight, target, 0.1, dtype=torch.float32)
    features.grad = weight.grad = None
    loss, nll = project_then_loss(features, weight, target, 0.1)
    loss.backward()
    assert torch.equal(got[0], loss.detach()) and torch.equal(got[2], features.grad)  # fp32: bit for bit
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        loss_eval, _ = projected_label_smoothed_nll_loss(features, weight, target, 0.1)
        loss_plain, _ = project_then_loss(features, weight, target, 0.1)
    assert torch.equal(loss_eval, loss_plain)


class Dict_:
    def __len__(self):
        return V

    def pad(self):
        return PAD


def tiny_transformer():
    shape = dict(encoder_layers=1, decoder_layers=1, encoder_embed_dim=C, decoder_embed_dim=C,
                 encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=2,
                 decoder_attention_heads=2, dropout=0.0, share_all_embeddings=True)
    torch.manual_seed(5)
    return build_model(shape, Dict_(), Dict_())


def sample_batch():
    g = torch.Generator().manual_seed(7)
    src = torch.randint(4, V, (6, 9), generator=g)
    prev = torch.randint(4, V, (6, 8), generator=g)
    target = torch.randint(4, V, (6, 8), generator=g)
    target[:2, -3:] = PAD
    return {"net_input": {"src_tokens": src, "src_lengths": torch.full((6,), 9), "prev_output_tokens": prev},
            "target": target, "ntokens": int(target.ne(PAD).sum())}


@pytest.mark.parametrize("name", ["label_smoothed_cross_entropy", "cross_entropy"])
def test_the_criteria_project_inside_the_loss_under_bf16(small_blocks, monkeypatch, name):
    """The real Transformer (tied embeddings: the output matrix is the embedding's Parameter): the criterion hands
    its features and matrix to the blocked loss, with the figures and gradients of projecting every position."""
    model, sample = tiny_transformer(), sample_batch()
    calls = []
    real_apply = criterion_module._ProjectedLabelSmoothedNLL.apply
    monkeypatch.setattr(criterion_module._ProjectedLabelSmoothedNLL, "apply",
                        lambda *args: calls.append(args[0].shape) or real_apply(*args))
    results = []
    for cfg in ({"name": name}, {"name": name, "project_all_positions": True}):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, sample_size, log = build_criterion(cfg, PAD)(model, sample)
        loss.backward()
        results.append((loss.detach(), log, [p.grad.clone() for p in model.parameters()]))
    assert calls == [(sample["ntokens"], C)]  # only the non-pad positions, and only the first criterion
    (loss_b, log_b, grads_b), (loss_p, log_p, grads_p) = results
    torch.testing.assert_close(loss_b, loss_p, rtol=2e-3, atol=1e-3)
    assert log_b["ntokens"] == log_p["ntokens"] == sample["ntokens"]
    assert log_b["nll_loss"] == pytest.approx(log_p["nll_loss"], rel=2e-3)
    for got, want in zip(grads_b, grads_p):
        torch.testing.assert_close(got, want, rtol=5e-2, atol=5e-3)


def test_a_subclass_that_overrides_compute_still_gets_its_logits(small_blocks):
    """A user's criterion built on a built-in one, changing compute() only (tests/test_numerical_faults.py has one
    whose validation loss is NaN): the built-in's blocked loss must not bypass it."""
    from nmt.plugins.criteria.label_smoothed_cross_entropy import LabelSmoothedCrossEntropy

    class Doubled(LabelSmoothedCrossEntropy):
        def compute(self, logits, target):
            loss, nll = super().compute(logits, target)
            return 2 * loss, nll

    model, sample = tiny_transformer(), sample_batch()
    plain = build_criterion({"name": "label_smoothed_cross_entropy"}, PAD)
    doubled = Doubled(plain.cfg, PAD)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _, _ = plain(model, sample)
        loss_doubled, _, _ = doubled(model, sample)
    torch.testing.assert_close(loss_doubled, 2 * loss, rtol=2e-3, atol=1e-3)


def test_a_replaced_output_layer_is_not_bypassed():
    """A quantized projection (nmt.generation.quantize) is not a plain product: no output matrix is offered."""
    model = tiny_transformer()
    assert model.output_matrix() is model.decoder.embed_tokens.weight
    model.decoder.output_projection = torch.nn.Linear(C, V, bias=False)
    assert model.output_matrix() is None
