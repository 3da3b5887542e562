"""The decoder cache's merge: a beam step's reorder done in the same copy as a merge gives what the two give one
after the other (nmt-serve's sentences join the running ones that way)."""

import torch

from nmt.models import incremental_state
from nmt.models.attention import KeyWindow
from nmt.models.incremental_state import (
    LEFT_PADS,
    key_window,
    merge_incremental_states,
    new_incremental_state,
    reorder_incremental_state,
)
from test_model_transformer import tiny, tokens


def decoded(model, src, prev):
    """The encoder output and the cache after feeding ``prev`` (B, T) one token at a time."""
    enc = model.encoder(src)
    state = new_incremental_state()
    for t in range(prev.size(1)):
        model.decoder(prev[:, : t + 1], enc, incremental_state=state)
    return enc, state


def owned(state):
    """Every entry's filled positions (the growing ones up to their length), to compare two caches."""
    out = {LEFT_PADS: state[LEFT_PADS]["pads"]}
    for key, entry in state.items():
        if key != LEFT_PADS:
            end = entry.get("length", entry["k"].size(2))
            out.update({(key, name): entry[name][:, :, :end] for name in ("k", "v")})
    return out


def test_reorder_in_the_merge_equals_a_reorder_then_a_merge():
    model = tiny()
    with torch.no_grad():
        # a: two rows 3 steps old and two that joined them 2 steps later (2 leading positions not their own)
        _, old = decoded(model, tokens(2, 6, 24, 1), tokens(2, 3, 32, 2))
        _, young = decoded(model, tokens(2, 4, 24, 3), tokens(2, 1, 32, 4))
        a = merge_incremental_states(old, young)
        _, b = decoded(model, tokens(3, 8, 24, 5), tokens(3, 1, 32, 6))  # joining: longer sources
        order = torch.tensor([3, 2, 3])  # only the young rows stay: nobody owns the first 2 positions
        fused = merge_incremental_states(a, b, order=order, encoder_order=order, drop_left=2)
        reordered = dict(a)
        reorder_incremental_state(reordered, order, drop_left=2)
        apart = merge_incremental_states(reordered, b)
    assert fused[LEFT_PADS]["pads"].tolist() == [0, 0, 0, 0, 0, 0]
    want, got = owned(apart), owned(fused)
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want)


def test_a_merged_cache_keeps_decoding_like_its_rows_alone():
    """The fused merge's leading positions are zeros the decoder masks: the next step of each row equals its
    step in its own cache."""
    model = tiny()
    src_a, prev_a = tokens(2, 6, 24, 1), tokens(2, 4, 32, 2)
    src_b, prev_b = tokens(1, 5, 24, 3), tokens(1, 2, 32, 4)
    with torch.no_grad():
        enc_a, a = decoded(model, src_a, prev_a[:, :3])
        enc_b, b = decoded(model, src_b, prev_b[:, :1])
        order = torch.tensor([1, 0])
        merged = merge_incremental_states(a, b, order=order, encoder_order=order)
        enc = model.merge_encoder_out(model.reorder_encoder_out(enc_a, order), enc_b)
        pad = 1
        window = torch.full((3, 4), pad)
        window[:2] = prev_a.index_select(0, order)
        window[2, 2:] = prev_b[0]
        together = model.decoder(window, enc, incremental_state=merged)[:, -1]  # (3, V)
        own_a = model.decoder(prev_a, enc_a, incremental_state=a)[:, -1].index_select(0, order)
        own_b = model.decoder(prev_b, enc_b, incremental_state=b)[:, -1]
    assert torch.allclose(together, torch.cat([own_a, own_b]), atol=1e-10)


def test_key_window_leaves_out_only_positions_every_row_of_its_part_does_not_own(monkeypatch):
    monkeypatch.setattr(incremental_state, "WINDOW_MIN_SKIPPED", 0)
    monkeypatch.setattr(incremental_state, "WINDOW_MIN_SHARE", 0.0)
    # join order: two rows from the start, three that joined 6 steps later, one 9 steps later
    w = key_window(torch.tensor([0, 0, 6, 6, 6, 9]), length=12)
    assert w == KeyWindow(2, (0, 6))  # skips 4 x 6 = 24 positions; a split before the last row skips 5 x 0 + 9
    # any order: each part starts at its own rows' fewest pads
    for seed in range(20):
        pads = torch.randint(0, 10, (7,), generator=torch.Generator().manual_seed(seed))
        w = key_window(pads, length=12)
        if w is not None:
            assert w.start == (int(pads[:w.split].min()), int(pads[w.split:].min()))
    assert key_window(torch.zeros(5, dtype=torch.long), length=12) is None  # every row owns every position
    monkeypatch.setattr(incremental_state, "WINDOW_MIN_SHARE", 0.5)
    assert key_window(torch.tensor([0, 0, 6, 6, 6, 9]), length=12) is None  # 24 of 72: not worth a second call


def test_a_step_attends_each_part_of_the_rows_on_its_own_keys_as_on_the_whole_cache(monkeypatch):
    """Two rows decoding for 5 steps, three that joined after 1 (4 leading positions not their own): with the
    self-attention split in two the next step's output is the whole cache's, and the young rows' call did
    not see the positions they do not own."""
    model = tiny()
    with torch.no_grad():
        enc_a, a = decoded(model, tokens(2, 6, 24, 1), tokens(2, 5, 32, 2))
        enc_b, b = decoded(model, tokens(3, 6, 24, 3), tokens(3, 1, 32, 4))
        merged = merge_incremental_states(a, b)
        enc = model.merge_encoder_out(enc_a, enc_b)
        window = torch.full((5, 6), 1)
        window[:2] = tokens(2, 6, 32, 5)
        window[2:, 4:] = tokens(3, 2, 32, 6)
        whole = model.decoder(window, enc, incremental_state=copy_state(merged))[:, -1]  # (5, V)
        monkeypatch.setattr(incremental_state, "WINDOW_MIN_SKIPPED", 0)
        monkeypatch.setattr(incremental_state, "WINDOW_MIN_SHARE", 0.0)
        seen = []
        attend = type(model.decoder.layers[0].self_attn).attend

        def spy(self, q, k, v, mask, causal, need_weights):
            if self.self_attention:
                seen.append((q.size(0), k.size(2)))
            return attend(self, q, k, v, mask, causal, need_weights)

        monkeypatch.setattr(type(model.decoder.layers[0].self_attn), "attend", spy)
        split = model.decoder(window, enc, incremental_state=copy_state(merged))[:, -1]
    assert seen and set(seen) == {(2, 6), (3, 2)}  # the old rows read all 6 positions, the young their own 2
    assert torch.allclose(split, whole, atol=1e-5)


def copy_state(state):
    """A cache whose tensors are the given one's copies (a step writes into its cache)."""
    return {key: {name: t.clone() if isinstance(t, torch.Tensor) else t for name, t in entry.items()}
            for key, entry in state.items()}
