"""Criteria: label smoothing against a hand computation, padding ignored, eps=0 == cross_entropy,
projection of non-pad positions only == full projection, figures reported in bits."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nmt.errors import ConfigError
from nmt.plugin_loader import load_plugins
from nmt.training.criterion import build_criterion, label_smoothed_nll_loss, loss_metrics

PAD, V = 1, 11
torch.set_num_threads(1)
load_plugins()


class TinyModel(nn.Module):
    """A stand-in with the Transformer's call signature, ``features_only`` and ``output_layer``."""

    def __init__(self, dim=8):
        super().__init__()
        self.embed = nn.Embedding(V, dim)
        self.proj = nn.Linear(dim, V)
        self.output_layer_calls = []

    def forward(self, src_tokens, src_lengths, prev_output_tokens, features_only=False):
        context = self.embed(src_tokens).mean(dim=1, keepdim=True)  # (B, 1, C)
        x = torch.tanh(self.embed(prev_output_tokens) + context)  # (B, T, C)
        return x if features_only else self.output_layer(x)

    def output_layer(self, features):
        self.output_layer_calls.append(tuple(features.shape))
        return self.proj(features)  # (..., V)


class NoProjectionModel(TinyModel):
    """A model without ``output_layer``: the criterion must fall back to the full logits."""

    def forward(self, src_tokens, src_lengths, prev_output_tokens):
        return self.proj(super().forward(src_tokens, src_lengths, prev_output_tokens, features_only=True))

    output_layer = property(lambda self: (_ for _ in ()).throw(AttributeError))


class Wrapper(nn.Module):
    """Like DistributedDataParallel: the model is ``.module`` and forward goes through the wrapper."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def make_sample(extra_pad=0):
    torch.manual_seed(0)
    target = torch.tensor([[4, 5, 6, 2], [7, 2, PAD, PAD], [8, 9, 2, PAD]])
    target = F.pad(target, (0, extra_pad), value=PAD)
    prev = torch.cat([torch.zeros(3, 1, dtype=torch.long), target[:, :-1]], dim=1)
    src = torch.tensor([[4, 4, 2], [5, 2, PAD], [6, 7, 2]])
    ntokens = int(target.ne(PAD).sum())
    return {"id": torch.arange(3), "nsentences": 3, "ntokens": ntokens, "target": target,
            "net_input": {"src_tokens": src, "src_lengths": torch.tensor([3, 2, 3]), "prev_output_tokens": prev}}


def hand_label_smoothed(logits, target, eps):
    """fairseq's definition written out: gold gets 1 - eps, every other class eps / (V - 1)."""
    lprobs = torch.log_softmax(logits.double(), dim=-1)
    total, nll = 0.0, 0.0
    for row, y in zip(lprobs, target.tolist()):
        if y == PAD:
            continue
        others = [row[v].item() for v in range(V) if v != y]
        total += -(1 - eps) * row[y].item() - eps / (V - 1) * sum(others)
        nll += -row[y].item()
    return total, nll


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothing_matches_a_hand_computation(eps):
    model, sample = TinyModel(), make_sample()
    criterion = build_criterion({"name": "label_smoothed_cross_entropy", "label_smoothing": eps}, PAD)
    loss, sample_size, log = criterion(model, sample)
    with torch.no_grad():
        logits = model(**sample["net_input"]).view(-1, V)
    want_loss, want_nll = hand_label_smoothed(logits, sample["target"].view(-1), eps)
    assert loss.item() == pytest.approx(want_loss, rel=1e-5)
    assert log["nll_loss"] == pytest.approx(want_nll, rel=1e-5)
    assert sample_size == log["ntokens"] == 9 and log["nsentences"] == 3


def test_padding_is_ignored():
    model = TinyModel()
    crit = build_criterion({"name": "label_smoothed_cross_entropy"}, PAD)
    loss_a, _, log_a = crit(model, make_sample())
    loss_b, _, log_b = crit(model, make_sample(extra_pad=5))
    assert loss_a.item() == pytest.approx(loss_b.item(), rel=1e-6)
    assert log_a["ntokens"] == log_b["ntokens"] == 9


def test_only_non_pad_positions_are_projected_and_results_match_full_projection():
    sample = make_sample()
    torch.manual_seed(1)
    model = TinyModel()
    sparse = build_criterion({"name": "label_smoothed_cross_entropy"}, PAD)
    full = build_criterion({"name": "label_smoothed_cross_entropy", "project_all_positions": True}, PAD)
    loss_s, _, _ = sparse(model, sample)
    assert model.output_layer_calls[-1] == (9, 8)  # (non-pad positions, C)
    grad_s = torch.autograd.grad(loss_s, model.proj.weight)[0]
    loss_f, _, _ = full(model, sample)
    assert model.output_layer_calls[-1] == (3, 4, 8)  # every position
    grad_f = torch.autograd.grad(loss_f, model.proj.weight)[0]
    assert loss_s.item() == pytest.approx(loss_f.item(), rel=1e-6)
    assert torch.allclose(grad_s, grad_f, atol=1e-6)


def test_wrapped_and_projection_less_models():
    sample = make_sample()
    torch.manual_seed(2)
    inner = TinyModel()
    crit = build_criterion({"name": "cross_entropy"}, PAD)
    plain, _, _ = crit(inner, sample)
    wrapped, _, _ = crit(Wrapper(inner), sample)
    assert inner.output_layer_calls[-1] == (9, 8)
    assert wrapped.item() == pytest.approx(plain.item(), rel=1e-6)
    bare = NoProjectionModel()
    bare.load_state_dict(inner.state_dict())
    assert crit(bare, sample)[0].item() == pytest.approx(plain.item(), rel=1e-6)


def test_eps_zero_equals_cross_entropy_equals_torch():
    model, sample = TinyModel(), make_sample()
    ce_loss, _, ce_log = build_criterion({"name": "cross_entropy"}, PAD)(model, sample)
    ls_loss, _, ls_log = build_criterion({"name": "label_smoothed_cross_entropy", "label_smoothing": 0.0},
                                         PAD)(model, sample)
    logits = model(**sample["net_input"])
    ref = F.cross_entropy(logits.view(-1, V), sample["target"].view(-1), ignore_index=PAD, reduction="sum")
    assert ce_loss.item() == pytest.approx(ls_loss.item(), rel=1e-6)
    assert ce_loss.item() == pytest.approx(ref.item(), rel=1e-5)
    assert ce_log["nll_loss"] == pytest.approx(ls_log["loss"], rel=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradient_matches_the_log_softmax_formula(eps):
    torch.manual_seed(3)
    logits = torch.randn(6, V, requires_grad=True)
    target = torch.tensor([0, 3, 4, 10, 2, 5])
    loss, nll = label_smoothed_nll_loss(logits, target, eps)
    grad = torch.autograd.grad(2.0 * loss + 0.5 * nll, logits)[0]  # both outputs carry gradient
    lp = torch.log_softmax(logits, -1)
    eps_i = eps / (V - 1)
    ref_nll = -lp.gather(-1, target[:, None]).sum()
    ref = (1 - eps - eps_i) * ref_nll + eps_i * -lp.sum()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-6)
    assert nll.item() == pytest.approx(ref_nll.item(), rel=1e-6)
    ref_grad = torch.autograd.grad(2.0 * ref + 0.5 * ref_nll, logits)[0]
    assert torch.allclose(grad, ref_grad, atol=1e-6)


def test_bf16_logits_are_reduced_in_fp32():
    torch.manual_seed(4)
    logits = (torch.randn(5, V) * 4).bfloat16()
    target = torch.tensor([1, 2, 3, 4, 5])
    loss, nll = label_smoothed_nll_loss(logits, target, 0.1)
    assert loss.dtype == torch.float32
    ref, _ = label_smoothed_nll_loss(logits.float(), target, 0.1)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-6)
    leaf = logits.clone().requires_grad_(True)
    label_smoothed_nll_loss(leaf, target, 0.1)[0].backward()
    assert leaf.grad.dtype == torch.bfloat16


def test_sentence_avg_uses_sentences_as_sample_size():
    crit = build_criterion({"name": "cross_entropy", "sentence_avg": True}, PAD)
    _, sample_size, log = crit(TinyModel(), make_sample())
    assert sample_size == log["sample_size"] == 3


def test_loss_metrics_report_bits_per_token_and_ppl():
    sums = {"loss": 16.0, "nll_loss": 12.0, "ntokens": 8, "nsentences": 3, "sample_size": 8}
    out = loss_metrics(sums)
    assert out["loss"] == pytest.approx(16.0 / 8 / math.log(2))
    assert out["nll_loss"] == pytest.approx(12.0 / 8 / math.log(2))
    assert out["ppl"] == pytest.approx(2 ** out["nll_loss"])
    assert loss_metrics({})["loss"] == 0.0
    assert loss_metrics({"nll_loss": 1e9, "ntokens": 1})["ppl"] == math.inf  # a diverged run logs, not crashes
    assert build_criterion({"name": "cross_entropy"}, PAD).reduce_metrics(sums) == out


def test_bad_label_smoothing_is_a_config_error():
    with pytest.raises(ConfigError, match="--label-smoothing"):
        build_criterion({"name": "label_smoothed_cross_entropy", "label_smoothing": 1.5}, PAD)


def test_under_bf16_autocast_the_loss_is_fp32_and_backpropagates():
    model, sample = TinyModel(), make_sample()
    crit = build_criterion({"name": "label_smoothed_cross_entropy"}, PAD)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _, log = crit(model, sample)
    assert loss.dtype == torch.float32
    loss.backward()
    assert model.proj.weight.grad is not None and torch.isfinite(model.proj.weight.grad).all()
    reference, _, _ = crit(model, sample)
    assert loss.item() == pytest.approx(reference.item(), rel=2e-2)  # bf16 matmuls, fp32 loss


def test_with_the_real_transformer_sparse_projection_equals_full():
    """The model's ``features_only`` / ``output_layer`` contract, end to end."""
    from nmt.models.build import build_model

    class Dict_:
        def __init__(self, n):
            self.n = n

        def __len__(self):
            return self.n

        def pad(self):
            return PAD

    shape = dict(encoder_layers=1, decoder_layers=1, encoder_embed_dim=16, decoder_embed_dim=16,
                 encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=2,
                 decoder_attention_heads=2, dropout=0.0)
    torch.manual_seed(5)
    model = build_model(shape, Dict_(V), Dict_(V))
    sample = make_sample(extra_pad=2)
    sparse = build_criterion({"name": "label_smoothed_cross_entropy"}, PAD)
    full = build_criterion({"name": "label_smoothed_cross_entropy", "project_all_positions": True}, PAD)
    loss_s, _, _ = sparse(model, sample)
    grads_s = torch.autograd.grad(loss_s, list(model.parameters()))
    loss_f, _, _ = full(model, sample)
    grads_f = torch.autograd.grad(loss_f, list(model.parameters()))
    assert loss_s.item() == pytest.approx(loss_f.item(), rel=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(grads_s, grads_f))
