"""Attention plugins on their own: restricted == full attention when the window covers the
sentence, restricted == a dense band mask otherwise, weights path == fused path, gradcheck."""

import pytest
import torch

from nmt.models.attention import AttentionBase, allowed_mask, softmax_attention
from nmt.models.decoder_cache import DecoderCache
from nmt.plugin_loader import load_plugins
from nmt.registry import ATTENTION

load_plugins()
torch.set_num_threads(1)


def make(name, dim=16, heads=2, causal=False, self_attention=True, window=4, seed=0):
    torch.manual_seed(seed)
    options = {"attention_window": window} if name == "restricted" else {}
    return ATTENTION.build(name, options, dim, heads, self_attention=self_attention, causal=causal,
                           dropout=0.0).double().eval()


def inputs(b=2, n=11, dim=16, pad_from=7, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, dim, generator=g, dtype=torch.double)
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[0, pad_from:] = True
    return x, mask


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [10, 11, 50])
def test_restricted_with_window_covering_the_sentence_equals_scaled_dot_product(causal, window):
    full = make("scaled_dot_product", causal=causal)
    restricted = make("restricted", causal=causal, window=window)
    restricted.load_state_dict(full.state_dict())
    x, mask = inputs()
    mask = None if causal else mask  # the decoder's self-attention takes no padding mask
    a, wa = full(x, key_padding_mask=mask, need_weights=True)
    b, wb = restricted(x, key_padding_mask=mask, need_weights=True)
    assert torch.allclose(a, b, atol=1e-12) and torch.allclose(wa, wb, atol=1e-12)
    assert torch.allclose(restricted(x, key_padding_mask=mask)[0], a, atol=1e-12)  # fused blockwise path


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window,n", [(0, 9), (2, 40), (3, 100)])  # several blocks of queries
def test_restricted_equals_full_attention_with_a_dense_band_mask(causal, window, n):
    restricted = make("restricted", causal=causal, window=window)
    x, pad = inputs(n=n, pad_from=n - 5)
    pad = None if causal else pad
    out, weights = restricted(x, key_padding_mask=pad, need_weights=True)
    q, k, v = restricted._heads(restricted.qkv_proj(x), 3)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    band = ((j - i).abs() <= window) & ((j <= i) if causal else True)
    mask = band if pad is None else band & ~pad[:, None, None, :]
    mask = mask | ((i == j) & ~mask.any(-1, keepdim=True))  # a pad query with no real key sees itself
    ref, ref_w = softmax_attention((q @ k.transpose(-2, -1)) * restricted.scale, v, mask, 0.0, False)
    ref = restricted.out_proj(ref.transpose(1, 2).reshape(x.shape))
    real = slice(None) if pad is None else ~pad[0]
    assert torch.allclose(out[0, real], ref[0, real], atol=1e-12) and torch.allclose(out[1], ref[1], atol=1e-12)
    assert torch.allclose(weights[1], ref_w[1], atol=1e-12)
    assert torch.all(weights[1][:, band.logical_not()] == 0)
    fused, _ = restricted(x, key_padding_mask=pad)
    assert torch.allclose(fused, out, atol=1e-12)


@pytest.mark.parametrize("name", ["scaled_dot_product", "additive"])
@pytest.mark.parametrize("self_attention,causal", [(True, False), (True, True), (False, False)])
def test_fused_path_equals_weights_path(name, self_attention, causal):
    attn = make(name, self_attention=self_attention, causal=causal)
    x, pad = inputs()
    memory, mem_pad = inputs(n=6, pad_from=3, seed=2)
    kv, mask = (None, None if causal else pad) if self_attention else (memory, mem_pad)
    fast, none = attn(x, kv, key_padding_mask=mask)
    slow, weights = attn(x, kv, key_padding_mask=mask, need_weights=True)
    assert none is None and weights.shape[:3] == (2, 2, 11)
    assert torch.allclose(fast, slow, atol=1e-12)


@pytest.mark.parametrize("name,causal", [("additive", False), ("additive", True), ("restricted", False),
                                         ("restricted", True)])
def test_gradcheck_on_tiny_double_inputs(name, causal):
    attn = make(name, dim=4, heads=2, causal=causal, window=1)
    x, pad = inputs(b=2, n=5, dim=4, pad_from=3)
    x.requires_grad_(True)
    mask = None if causal else pad
    assert torch.autograd.gradcheck(lambda t: attn(t, key_padding_mask=mask)[0], (x,))
    params = tuple(attn.parameters())
    assert torch.autograd.gradcheck(lambda *p: torch.func.functional_call(
        attn, dict(zip([n for n, _ in attn.named_parameters()], p)), (x.detach(),),
        {"key_padding_mask": mask})[0], params)


def test_restricted_decoder_cache_keeps_only_the_window():
    attn = make("restricted", causal=True, window=3)
    x, _ = inputs(n=9)
    state = DecoderCache()
    steps = [attn(x[:, t:t + 1], incremental_state=state)[0] for t in range(9)]
    assert state.self_attn[attn.state_key].k.size(2) == 4  # r + 1 keys, O(r) memory while generating
    assert torch.allclose(torch.cat(steps, 1), attn(x)[0], atol=1e-12)


def test_allowed_mask_is_none_without_padding_or_causality():
    assert allowed_mask(5, 5, None, False, torch.device("cpu")) is None
    assert allowed_mask(1, 5, None, True, torch.device("cpu")) is None  # one new query sees all the cache


def test_every_registered_attention_is_an_attention_base():
    for name in ATTENTION:
        assert issubclass(ATTENTION.get(name), AttentionBase), name


class LargestTensor(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the element count of the largest tensor any op produces."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("causal", [False, True])
def test_restricted_never_builds_an_n_by_n_tensor(causal):
    n = 1024
    restricted = make("restricted", dim=8, heads=2, causal=causal, window=4).float()
    x = torch.randn(1, n, 8, requires_grad=True)
    with LargestTensor() as seen:
        restricted(x)[0].sum().backward()
    assert seen.largest < n * n / 8  # O(n * r): no (n, n) score matrix, forward or backward
    with LargestTensor() as dense:
        restricted(x, need_weights=True)  # the weights for inspection are n x n by design
    assert dense.largest >= n * n
