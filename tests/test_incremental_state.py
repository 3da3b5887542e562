"""The decoder cache's merge: a beam step's reorder done in the same copy as a merge gives what the two give one
after the other (nmt-serve's sentences join the running ones that way)."""

import torch

from nmt.models.incremental_state import (
    LEFT_PADS,
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
