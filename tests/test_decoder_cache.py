"""The decoder cache (nmt.models.decoder_cache): reorder and merge by hand (rows in order, dropped positions,
right-aligned rows, padded sources, the given cache left as it was); a beam step's reorder done in the same copy as
a merge gives what the two give one after the other (nmt-serve's sentences join the running ones that way); an
attention plugin's own entry survives a reorder; a plugin written for the dict cache still decodes."""

import pytest
import torch

from nmt.models import decoder_cache
from nmt.models.attention import AttentionBase
from nmt.models.decoder_cache import CacheEntry, DecoderCache, KeyWindow, key_window
from nmt.plugins.attention.scaled_dot_product import ScaledDotProductAttention
from test_model_transformer import tiny, tokens


def decoded(model, src, prev):
    """The encoder output and the cache after feeding ``prev`` (B, T) one token at a time."""
    enc = model.encoder(src)
    state = model.new_incremental_state()
    for t in range(prev.size(1)):
        model.decoder(prev[:, : t + 1], enc, incremental_state=state)
    return enc, state


def owned(state):
    """Every entry's filled positions (the growing ones up to their length), to compare two caches."""
    out = {"left_pads": state.left_pads}
    for side, entries in (("self", state.self_attn), ("cross", state.cross_attn)):
        for key, entry in entries.items():
            end = entry.k.size(2) if entry.length is None else entry.length
            out.update({(side, key, name): t[:, :, :end] for name, t in (("k", entry.k), ("v", entry.v))})
    return out


def copy_state(state):
    """A cache whose tensors are the given one's copies (a step writes into its cache)."""
    def copied(entries):
        return {key: CacheEntry(e.k.clone(), e.v.clone(), e.length) for key, e in entries.items()}
    return DecoderCache(copied(state.self_attn), copied(state.cross_attn), state.left_pads)


def growing(rows, length, capacity, heads=2, dim=3, start=0.0):
    """A growing entry whose filled values count up from ``start`` (row-major), the room past them NaN."""
    k = torch.full((rows, heads, capacity, dim), float("nan"))
    k[:, :, :length] = torch.arange(rows * heads * length * dim, dtype=torch.float).view(rows, heads, length, dim)
    k[:, :, :length] += start
    return CacheEntry(k, -k, length)


def fixed(rows, src, heads=2, dim=3):
    k = torch.randn(rows, heads, src, dim, generator=torch.Generator().manual_seed(rows * src))
    return CacheEntry(k, k + 1)


def test_reorder_takes_rows_in_order_forgets_dropped_positions_and_leaves_the_cache_as_it_was():
    entry, cross = growing(3, length=4, capacity=16), fixed(3, src=5)
    pads = torch.tensor([0, 2, 3])
    cache = DecoderCache({"self": entry}, {"cross": cross}, pads)
    order = torch.tensor([2, 1, 1])
    new = cache.reorder(order, drop_left=2)
    got = new.self_attn["self"]
    assert got.length == 2 and got.k.shape == (3, 2, 3, 3)  # room for exactly one more step
    assert torch.equal(got.k[:, :, :2], entry.k[order][:, :, 2:4]) and torch.equal(got.v[:, :, :2], -got.k[:, :, :2])
    assert new.left_pads.tolist() == [1, 0, 0]
    assert torch.equal(new.cross_attn["cross"].k, cross.k[order])  # no encoder_order: the rows' own order
    # the given cache is unchanged: same entries, same values
    assert cache.self_attn["self"] is entry and cache.left_pads is pads and entry.length == 4
    assert torch.equal(entry.k[:, :, :4], growing(3, length=4, capacity=16).k[:, :, :4])


def test_cross_attention_entries_follow_the_encoder_order_or_stay():
    cache = DecoderCache({"self": growing(4, length=2, capacity=16)}, {"cross": fixed(2, src=5)})
    beams = torch.tensor([2, 3, 0, 1])  # two sentences of two beams, swapped
    swapped = cache.reorder(beams, encoder_order=torch.tensor([1, 0]))
    assert torch.equal(swapped.cross_attn["cross"].k, cache.cross_attn["cross"].k.flip(0))
    kept = cache.reorder(beams, encoder_order=torch.tensor([1, 0]), keep_encoder=True)
    assert kept.cross_attn["cross"] is cache.cross_attn["cross"]  # never changed: shared, not copied
    assert swapped.left_pads is None and kept.self_attn["self"].length == 2


def test_merge_right_aligns_the_rows_and_pads_the_shorter_source():
    a = DecoderCache({"self": growing(2, length=3, capacity=16)}, {"cross": fixed(2, src=4)}, torch.tensor([0, 1]))
    b = DecoderCache({"self": growing(1, length=1, capacity=16, start=100.0)}, {"cross": fixed(1, src=6)})
    merged = a.merge(b)
    entry = merged.self_attn["self"]
    assert entry.length == 3 and entry.k.shape == (3, 2, 4, 3)  # room for one more step
    assert merged.left_pads.tolist() == [0, 1, 2]  # b's row owns only its last position
    assert torch.equal(entry.k[:2, :, :3], a.self_attn["self"].k[:, :, :3])
    assert torch.equal(entry.k[2, :, 2], b.self_attn["self"].k[0, :, 0])
    assert not entry.k[2, :, :2].any()  # zeros where the row does not own a position (the decoder masks them)
    cross = merged.cross_attn["cross"]
    assert cross.k.shape == (3, 2, 6, 3) and not cross.k[:2, :, 4:].any()  # a's source padded on the right
    assert torch.equal(cross.v[2:], b.cross_attn["cross"].v)
    # a's second row twice, without the first position (not its own), in the same copy: a reorder, then a merge
    order = torch.tensor([1, 1])
    fused = a.merge(b, order=order, encoder_order=order, drop_left=1)
    apart = a.reorder(order, drop_left=1).merge(b)
    assert fused.left_pads.tolist() == apart.left_pads.tolist() == [0, 0, 1]
    assert fused.self_attn["self"].length == 2
    assert all(torch.equal(x, y) for x, y in zip(owned(fused).values(), owned(apart).values()))


def test_merge_refuses_caches_it_cannot_align():
    a = DecoderCache({"self": growing(2, length=3, capacity=16)})
    with pytest.raises(ValueError, match="different decoders"):
        a.merge(DecoderCache({"other": growing(1, length=1, capacity=16)}))
    mixed = DecoderCache({"x": growing(1, 2, 16), "y": growing(1, 3, 16)})
    with pytest.raises(ValueError, match="different steps"):
        mixed.merge(mixed)
    windowed = DecoderCache({"self": CacheEntry(torch.zeros(1, 2, 3, 3), torch.zeros(1, 2, 3, 3))})
    with pytest.raises(ValueError, match="cache of its own"):
        windowed.merge(windowed)
    with pytest.raises(ValueError, match="decode one step"):
        DecoderCache().merge(a)


def test_reorder_in_the_merge_equals_a_reorder_then_a_merge():
    model = tiny()
    with torch.no_grad():
        # a: two rows 3 steps old and two that joined them 2 steps later (2 leading positions not their own)
        _, old = decoded(model, tokens(2, 6, 24, 1), tokens(2, 3, 32, 2))
        _, young = decoded(model, tokens(2, 4, 24, 3), tokens(2, 1, 32, 4))
        a = old.merge(young)
        _, b = decoded(model, tokens(3, 8, 24, 5), tokens(3, 1, 32, 6))  # joining: longer sources
        order = torch.tensor([3, 2, 3])  # only the young rows stay: nobody owns the first 2 positions
        fused = a.merge(b, order=order, encoder_order=order, drop_left=2)
        apart = a.reorder(order, drop_left=2).merge(b)
    assert fused.left_pads.tolist() == [0, 0, 0, 0, 0, 0]
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
        merged = a.merge(b, order=order, encoder_order=order)
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
    monkeypatch.setattr(decoder_cache, "WINDOW_MIN_SKIPPED", 0)
    monkeypatch.setattr(decoder_cache, "WINDOW_MIN_SHARE", 0.0)
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
    monkeypatch.setattr(decoder_cache, "WINDOW_MIN_SHARE", 0.5)
    assert key_window(torch.tensor([0, 0, 6, 6, 6, 9]), length=12) is None  # 24 of 72: not worth a second call


def test_a_step_attends_each_part_of_the_rows_on_its_own_keys_as_on_the_whole_cache(monkeypatch):
    """Two rows decoding for 5 steps, three that joined after 1 (4 leading positions not their own): with the
    self-attention split in two the next step's output is the whole cache's, and the young rows' call did
    not see the positions they do not own."""
    model = tiny()
    with torch.no_grad():
        enc_a, a = decoded(model, tokens(2, 6, 24, 1), tokens(2, 5, 32, 2))
        enc_b, b = decoded(model, tokens(3, 6, 24, 3), tokens(3, 1, 32, 4))
        merged = a.merge(b)
        enc = model.merge_encoder_out(enc_a, enc_b)
        window = torch.full((5, 6), 1)
        window[:2] = tokens(2, 6, 32, 5)
        window[2:, 4:] = tokens(3, 2, 32, 6)
        whole = model.decoder(window, enc, incremental_state=copy_state(merged))[:, -1]  # (5, V)
        monkeypatch.setattr(decoder_cache, "WINDOW_MIN_SKIPPED", 0)
        monkeypatch.setattr(decoder_cache, "WINDOW_MIN_SHARE", 0.0)
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


WINDOW = 3


class WindowWithRowSums(ScaledDotProductAttention):
    """A plugin keeping a cache of its own: the last WINDOW + 1 keys, and per row the sum of every value it saw
    (a per-row tensor of its own, in ``extra``)."""

    def cache_append(self, cached, k, v):
        if cached is not None:
            k, v = torch.cat([cached.k, k], dim=2), torch.cat([cached.v, v], dim=2)
        seen = v[:, :, -1].sum(-1) + (0 if cached is None else cached.extra["seen"])  # (B, H)
        return CacheEntry(k[:, :, -WINDOW - 1:], v[:, :, -WINDOW - 1:], extra={"seen": seen}), k, v


class DictCacheWindow(ScaledDotProductAttention):
    """The same window written for the dict entries of earlier versions (deprecated, still decodes)."""

    def cache_append(self, cached, k, v):
        if cached is not None:
            k, v = torch.cat([cached["k"], k], dim=2), torch.cat([cached["v"], v], dim=2)
        return {"k": k[:, :, -WINDOW - 1:], "v": v[:, :, -WINDOW - 1:]}, k, v


def plugin(cls: type[AttentionBase]) -> AttentionBase:
    torch.manual_seed(0)
    return cls(None, 16, 2, self_attention=True, causal=True).double().eval()


def steps(attn, x, cache, ts):
    """The module's outputs (B, len(ts), C) for the queries ``x[:, t]`` fed one at a time through ``cache``."""
    return torch.cat([attn(x[:, t:t + 1], incremental_state=cache)[0] for t in ts], dim=1)


def test_an_attention_plugins_own_cache_entry_round_trips_through_a_reorder():
    """Entries without a length (the plugin's whole window) and the plugin's own per-row tensors are reordered
    with the rows: after a reorder the cache and the next steps are those of the reordered batch decoded alone."""
    attn = plugin(WindowWithRowSums)
    x = torch.randn(3, 8, 16, dtype=torch.double, generator=torch.Generator().manual_seed(1))
    order = torch.tensor([2, 0, 0])
    with torch.no_grad():
        cache = DecoderCache()
        steps(attn, x, cache, range(5))
        cache = cache.reorder(order)
        after = steps(attn, x.index_select(0, order), cache, range(5, 8))
        alone = DecoderCache()
        want = steps(attn, x.index_select(0, order), alone, range(8))
    got, expected = cache.self_attn[attn.state_key], alone.self_attn[attn.state_key]
    assert got.length is None and got.k.size(2) == WINDOW + 1
    assert torch.allclose(got.extra["seen"], expected.extra["seen"], atol=1e-12)
    assert torch.allclose(got.k, expected.k, atol=1e-12)
    assert torch.allclose(after, want[:, 5:], atol=1e-12)


def test_a_plugin_written_for_the_dict_cache_still_decodes_with_a_deprecation_warning():
    old, new = plugin(DictCacheWindow), plugin(WindowWithRowSums)
    x = torch.randn(2, 6, 16, dtype=torch.double, generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), pytest.warns(DeprecationWarning, match="DictCacheWindow.cache_append returned a dict"):
        cache = DecoderCache()
        got = steps(old, x, cache, range(3))
        cache = cache.reorder(torch.tensor([1, 0]))
        got = torch.cat([got.flip(0), steps(old, x.flip(0), cache, range(3, 6))], dim=1)
    assert torch.allclose(got, steps(new, x.flip(0), DecoderCache(), range(6)), atol=1e-12)
    assert cache.self_attn[old.state_key]["k"].size(2) == WINDOW + 1  # its entries still read as dicts


def test_the_decoder_refuses_a_dict_for_its_cache():
    model = tiny()
    with pytest.raises(TypeError, match="DecoderCache"):
        model.decoder(tokens(1, 1, 32, 1), model.encoder(tokens(1, 3, 24, 2)), incremental_state={})
