"""The decoder's cache while generating: what each attention module of the decoder computed for the tokens so
far, as named fields of plain tensors (:class:`DecoderCache`, one :class:`CacheEntry` per module).

A container and nothing more, because a decoding step takes it in and hands it on: searches keep, reorder and
merge its rows, and a functional decoder step ``step(tokens, encoder_out, cache) -> (logits, cache)`` (what an
ONNX export needs: the cache as the step's inputs and outputs) will take it and return it. So it holds tensors and
lengths, no module, and a step stores new entries instead of changing the stored ones.

A self-attention entry with a ``length`` keeps its keys/values in a buffer with room to grow
(``AttentionBase.cache_append``). Reordering one copies only the ``length`` filled positions, into
a new buffer with room for exactly one more step: beam search reorders after every step, so the
next step's keys fill the buffer and attention reads one contiguous tensor (a strided slice of a
larger buffer costs the matrix product a copy of its own).

Rows that started decoding at different times can share one cache (:meth:`DecoderCache.merge`,
used by searches that refill finished rows with new sentences): the growing entries are kept
right-aligned, so every row writes its next keys at the same index, and ``left_pads`` says how
many leading positions of each row are not its own. The decoder reads it to mask those
positions and to give each row its own position numbers. Cross-attention entries hold the
projected encoder output: merged rows pad it on the right, like the source.

A cache without ``room`` (an engine's, nmt.engines.member) keeps its growing entries exactly as long as they are
filled: its step takes the keys as one dense input and joins the new ones itself, so room would only be copied
out again."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

# A step's self-attention is split in two (KeyWindow) only when that leaves out at least this many cached
# positions of all rows together and this share of them: the second call costs about ten more operators per
# layer (tens of microseconds), and a position left out saves reading its keys and values (a tenth of a
# microsecond for 4 heads of 64 in fp32).
WINDOW_MIN_SKIPPED = 1024
WINDOW_MIN_SHARE = 0.25


class CacheEntry:
    """One attention module's cached keys ``k`` (B, H, S, d_k) and values ``v`` (B, H, S, D), batch first.

    With a ``length``: a self-attention buffer whose first ``length`` positions are filled and the rest is room
    for the next steps (the default growing cache). Without (None): every position of ``k`` and ``v`` is filled
    (the projected encoder output, or a plugin's own cache such as restricted attention's last r + 1 keys).
    ``extra``: a plugin's own per-row tensors (batch first), reordered with the rows. A stored entry is not
    changed: a step stores a new one (whose buffer may be the old one's, filled further)."""

    __slots__ = ("k", "v", "length", "extra")  # a step makes one per layer: no per-instance dict

    def __init__(self, k: Tensor, v: Tensor, length: Optional[int] = None,
                 extra: Optional[dict[str, Tensor]] = None):
        self.k = k
        self.v = v
        self.length = length
        self.extra = extra

    def reorder(self, order: Tensor, drop_left: int = 0, room: bool = True) -> CacheEntry:
        """The entry whose row b is this one's row ``order[b]``; a growing one also forgets its first
        ``drop_left`` positions (no row owns them any more) and gets room for exactly one more step (unless not
        ``room``)."""
        extra = None if self.extra is None else {
            name: t.index_select(0, order) if isinstance(t, Tensor) else t for name, t in self.extra.items()}
        if self.length is None:
            return CacheEntry(self.k.index_select(0, order), self.v.index_select(0, order), None, extra)
        kept = self.length - drop_left
        k, v = (_rows_with_room(buf[:, :, drop_left:self.length], order, room) for buf in (self.k, self.v))
        return CacheEntry(k, v, kept, extra)

    def __getitem__(self, name: str) -> Any:
        """Deprecated: ``entry["k"]``, as plugins read the dict entries of earlier versions."""
        if name in ("k", "v", "length"):
            return getattr(self, name)
        if self.extra is not None and name in self.extra:
            return self.extra[name]
        raise KeyError(name)

    @classmethod
    def from_dict(cls, entry: dict[str, Any], owner: str) -> CacheEntry:
        """Deprecated: the entry of a dict that ``owner``'s ``cache_append`` returned, as written for earlier
        versions ({"k", "v", maybe "length", its own tensors})."""
        warnings.warn(f"{owner}.cache_append returned a dict: return a nmt.models.decoder_cache.CacheEntry "
                      "(docs/writing-plugins.md)", DeprecationWarning, stacklevel=3)
        extra = {name: t for name, t in entry.items() if name not in ("k", "v", "length")}
        return cls(entry["k"], entry["v"], entry.get("length"), extra or None)


class DecoderCache:
    """The cache of one decoder while generating: each attention module's entry under its ``state_key``.

    ``self_attn``: the self-attention entries, keys and values of the tokens so far (one row per decoder row).
    ``cross_attn``: the encoder-decoder attention entries, the projected encoder output, computed at the first
    step and never changed (one row per decoder row, or per sentence when its beams share it).
    ``left_pads`` (B,) long: the leading positions of the self-attention entries each row does not own (rows that
    joined later, :meth:`merge`); None while every row owns every position.
    ``room``: whether reordered and merged growing entries get room for the next step's keys (module docstring)."""

    __slots__ = ("self_attn", "cross_attn", "left_pads", "room")

    def __init__(self, self_attn: Optional[dict[str, CacheEntry]] = None,
                 cross_attn: Optional[dict[str, CacheEntry]] = None, left_pads: Optional[Tensor] = None,
                 room: bool = True):
        self.self_attn: dict[str, CacheEntry] = {} if self_attn is None else self_attn
        self.cross_attn: dict[str, CacheEntry] = {} if cross_attn is None else cross_attn
        self.left_pads = left_pads
        self.room = room

    def reorder(self, order: Tensor, *, encoder_order: Optional[Tensor] = None, keep_encoder: bool = False,
                drop_left: int = 0) -> DecoderCache:
        """A new cache whose row b is this one's row ``order[b]`` (this one stays as it is). ``drop_left``: also
        forget the first positions of the growing entries (no row owns them any more). The cross-attention entries
        follow ``encoder_order`` if given (beams sharing their sentence's row), else ``order``; ``keep_encoder``
        keeps them as they are (beams re-ranked within their sentences: identical across a sentence's rows, or
        shared)."""
        self_attn = {key: entry.reorder(order, drop_left, self.room) for key, entry in self.self_attn.items()}
        if keep_encoder:
            cross_attn = dict(self.cross_attn)  # entries are never changed: sharing them is safe
        else:
            rows = order if encoder_order is None else encoder_order
            cross_attn = {key: entry.reorder(rows) for key, entry in self.cross_attn.items()}
        pads = self.left_pads
        if pads is not None:
            pads = pads.index_select(0, order)
            if drop_left:
                pads = pads - drop_left
        return DecoderCache(self_attn, cross_attn, pads, self.room)

    def merge(self, other: DecoderCache, *, order: Optional[Tensor] = None, encoder_order: Optional[Tensor] = None,
              drop_left: int = 0) -> DecoderCache:
        """A new cache holding this one's rows then ``other``'s. Both must come from the same decoder, keeping the
        default growing self-attention cache; its entries are right-aligned (zeros before a row's own positions,
        which the decoder masks: ``left_pads``) and the cross-attention ones are right-padded with zeros to the
        longer source.

        ``order`` takes this cache's rows in that order (a beam step's reorder, done in the same copy as the merge
        instead of a copy of its own), without their first ``drop_left`` positions; this cache's cross-attention rows
        then follow ``encoder_order`` (None: they stay as they are)."""
        rows_a, rows_b = self.rows(), other.rows()
        if self.self_attn.keys() != other.self_attn.keys() or self.cross_attn.keys() != other.cross_attn.keys():
            raise ValueError("DecoderCache.merge: the caches come from different decoders")
        end_a, len_b = self._length(), other._length()
        len_a = end_a - drop_left
        length = max(len_a, len_b)
        pads_a = self._pads(rows_a)
        if order is not None:
            pads_a = pads_a.index_select(0, order)
        pads_a = pads_a - drop_left + (length - len_a)
        pads_b = other._pads(rows_b) + (length - len_b)
        self_attn = {key: _right_aligned(entry, other.self_attn[key], order, drop_left, length, self.room)
                     for key, entry in self.self_attn.items()}
        cross_attn = {}
        for key, entry in self.cross_attn.items():
            fixed, more = entry if encoder_order is None else entry.reorder(encoder_order), other.cross_attn[key]
            src = max(fixed.k.size(2), more.k.size(2))
            cross_attn[key] = CacheEntry(torch.cat([pad_time(fixed.k, src), pad_time(more.k, src)]),
                                         torch.cat([pad_time(fixed.v, src), pad_time(more.v, src)]))
        return DecoderCache(self_attn, cross_attn, torch.cat([pads_a, pads_b]), self.room)

    def rows(self) -> int:
        """Decoder rows: those of a self-attention entry (cross-attention ones may have one row per sentence)."""
        for entry in self.self_attn.values():
            return entry.k.size(0)
        raise ValueError("DecoderCache: no self-attention entry yet (decode one step before merging)")

    def assign(self, other: DecoderCache) -> None:
        """Hold ``other``'s entries, left pads and room: for callers that change a cache in place (fairseq's
        ``reorder_incremental_state`` contract)."""
        self.self_attn, self.cross_attn, self.left_pads = other.self_attn, other.cross_attn, other.left_pads
        self.room = other.room

    def _length(self) -> int:
        """The positions every growing self-attention entry holds."""
        lengths = {entry.length for entry in self.self_attn.values()}
        if None in lengths:
            raise ValueError("DecoderCache.merge: a self-attention plugin keeps a cache of its own (cache_append)")
        if len(lengths) > 1:
            raise ValueError("DecoderCache.merge: the entries come from different steps")
        (length,) = lengths
        assert length is not None
        return length

    def _pads(self, rows: int) -> Tensor:
        if self.left_pads is not None:
            return self.left_pads
        device = next(iter(self.self_attn.values())).k.device
        return torch.zeros(rows, dtype=torch.long, device=device)


def _rows_with_room(x: Tensor, order: Tensor, room: bool = True) -> Tensor:
    """Rows ``order`` of ``x`` (B, H, L, D) in a new buffer (B', H, L + 1, D): room for the next step's keys
    (without ``room``: (B', H, L, D))."""
    _, H, L, D = x.shape
    if not room:
        return x.index_select(0, order)
    target = x.new_empty((order.numel(), H, L + 1, D))
    torch.index_select(x, 0, order, out=target[:, :, :L])
    return target


def _right_aligned(a: CacheEntry, b: CacheEntry, order: Optional[Tensor], drop_left: int,
                   length: int, room: bool = True) -> CacheEntry:
    """The growing entry of ``a``'s rows (in ``order``, without their first ``drop_left`` positions) then ``b``'s,
    each row's positions ending at ``length``, zeros before them, and room for one more step (if ``room``)."""
    assert a.length is not None and b.length is not None  # DecoderCache._length checked
    len_a, len_b = a.length - drop_left, b.length
    n_a = a.k.size(0) if order is None else order.numel()
    merged = []
    for x, y in ((a.k, b.k), (a.v, b.v)):
        x, y = x[:, :, drop_left:a.length], y[:, :, :len_b]  # (B, H, len, d_k|D)
        _, H, _, D = x.shape
        buf = x.new_empty((n_a + y.size(0), H, length + int(room), D))  # room for the next step
        if order is None:
            buf[:n_a, :, length - len_a:length] = x
        else:
            torch.index_select(x, 0, order, out=buf[:n_a, :, length - len_a:length])
        buf[n_a:, :, length - len_b:length] = y
        buf[:n_a, :, :length - len_a].zero_()  # positions no row of its part owns
        buf[n_a:, :, :length - len_b].zero_()
        merged.append(buf)
    return CacheEntry(merged[0], merged[1], length)


def pad_time(x: Tensor, length: int) -> Tensor:
    """(B, H, S, D) right-padded with zeros to S = ``length``."""
    return x if x.size(2) == length else F.pad(x, (0, 0, 0, length - x.size(2)))


@dataclass(frozen=True)
class KeyWindow:
    """Where a decoding step's self-attention may skip cached keys. Rows that joined a running batch later
    (a refilled search) sit after the older ones and own none of the cache's first positions; reading those
    masked keys is most of a refilled greedy step's attention (its cache is as long as its oldest row is old).
    Rows before ``split`` read the keys from ``start[0]`` on, the rest from ``start[1]`` on: every key left
    out is masked for every query of its group (:func:`key_window`)."""

    split: int
    start: tuple[int, int]


def key_window(pads: Tensor, length: int) -> Optional[KeyWindow]:
    """Where to split a decoding step's rows so that each part's self-attention skips the leading cache
    positions none of its rows owns, given each row's ``pads`` (B,) and the cache's ``length``; None when
    that would not pay. Rows come in the order they joined the search (older rows first, owning more), so
    one split, chosen to skip the most, leaves out most of what a row-by-row window would."""
    p = pads.tolist()
    rows = len(p)
    if rows < 2:
        return None
    first = list(accumulate(p, min))  # first[i]: positions rows 0..i all leave out
    last = list(accumulate(reversed(p), min))[::-1]  # last[i]: positions rows i.. all leave out
    skipped, split = max((s * first[s - 1] + (rows - s) * last[s], s) for s in range(1, rows))
    if not skipped or skipped < max(WINDOW_MIN_SKIPPED, WINDOW_MIN_SHARE * rows * length):
        return None
    return KeyWindow(split, (first[split - 1], last[split]))
