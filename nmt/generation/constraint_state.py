"""The tensors a constrained beam search keeps about its phrases (nmt.plugins.search.constrained): each running
sentence's phrases (:class:`PhraseTable`), each row's progress through them (:class:`Progress`), and the rules on
them, every one computed for all rows (or all candidates) at once.

A row is *free* or *committed* to one phrase: a row starts a phrase only as a forced candidate and must then
produce its next token at every step until it is complete. A partly produced phrase is never abandoned, so an
output never holds a phrase's first pieces repeated or left dangling to reach it. A free row's own choice of tokens
that happens to spell a phrase counts too (``advance``: the phrase then is a suffix of its output), and the phrase
a free row starts takes the pieces of it the row just wrote as its beginning (``forced``); phrases never overlap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from nmt.errors import UsageError
from nmt.generation.constraints import ConstraintMap

NO_TOKEN = -1  # a phrase table's padding (no dictionary id is negative)


@dataclass
class PhraseTable:
    """The phrases of n sentences, padded to C phrases of L tokens."""

    tokens: torch.Tensor  # (n, C, L) ids, NO_TOKEN after a phrase's end (C, L >= 1)
    lengths: torch.Tensor  # (n, C) tokens of each phrase (0: no phrase)
    live: torch.Tensor  # (n, C) bool: a phrase the search tries to meet (not one that cannot fit the length limit)
    ordered: torch.Tensor  # (n,) bool: the phrases must come in their order
    by_word: torch.Tensor  # (n,) bool: the phrases start where a word starts (the sentence gave ``mid_word``)
    mid_word: Optional[torch.Tensor] = None  # (V,) bool: the pieces a word goes on after (None: no sentence says)
    right: torch.Tensor = field(init=False)  # (n, C, L) each phrase at the right end (NO_TOKEN before it)

    def __post_init__(self) -> None:
        width = self.tokens.size(2)
        src = torch.arange(width).view(1, 1, -1) - (width - self.lengths).unsqueeze(2)  # (n, C, L) column taken
        self.right = self.tokens.gather(2, src.clamp(min=0)).masked_fill(src < 0, NO_TOKEN)

    @staticmethod
    def of(ids: Sequence[int], constraints: Optional[ConstraintMap], limits: torch.Tensor,
           specials: Sequence[int]) -> "PhraseTable":
        """The phrases ``constraints`` gives sentences ``ids``, whose ``limits`` (n,) are the tokens they may generate
        before their eos. A phrase that does not fit the limit after the earlier ones is not tried (ordered: nor
        are the ones after it), and every output reports it unmet; a phrase holding one of the ``specials`` (bos,
        eos, pad) is refused."""
        found = [constraints.get(i) if constraints is not None else None for i in ids]
        phrases = [list(c.phrases) if c is not None else [] for c in found]
        n, count = len(ids), max([1] + [len(p) for p in phrases])
        width = max([1] + [int(t.numel()) for p in phrases for t in p])
        tokens = torch.full((n, count, width), NO_TOKEN, dtype=torch.long)
        lengths = torch.zeros(n, count, dtype=torch.long)
        live = torch.zeros(n, count, dtype=torch.bool)
        order = torch.tensor([c is not None and c.ordered for c in found], dtype=torch.bool)
        by_word = torch.tensor([c is not None and c.mid_word is not None for c in found], dtype=torch.bool)
        mid_word = next((c.mid_word for c in found if c is not None and c.mid_word is not None), None)
        special = torch.tensor(list(specials), dtype=torch.long)
        for s, (sid, own) in enumerate(zip(ids, phrases)):
            room = int(limits[s])
            for c, t in enumerate(own):
                if bool(torch.isin(t, special).any()):
                    raise UsageError(f"sentence {sid}: a constraint phrase holds a special symbol (<s>, </s>, <pad>); "
                                     "give words of the target text only")
                tokens[s, c, : t.numel()] = t
                lengths[s, c] = t.numel()
                fits = t.numel() <= room
                if fits:
                    room -= int(t.numel())
                live[s, c] = fits and (not bool(order[s]) or bool(live[s, :c].all()))
        return PhraseTable(tokens, lengths, live, order, by_word, mid_word)

    @property
    def count(self) -> int:
        """C: phrases per sentence (padded)."""
        return self.lengths.size(1)

    def select(self, sentences: torch.Tensor) -> "PhraseTable":
        return PhraseTable(self.tokens[sentences], self.lengths[sentences], self.live[sentences],
                           self.ordered[sentences], self.by_word[sentences], self.mid_word)

    def joined(self, other: "PhraseTable") -> "PhraseTable":
        """These sentences' phrases then ``other``'s, padded to the wider of both."""
        c, w = max(self.count, other.count), max(self.tokens.size(2), other.tokens.size(2))

        def pad(x: torch.Tensor, value: float, *dims: int) -> torch.Tensor:
            sizes = [0] * (2 * (x.dim() - 1))
            for d, size in zip(range(1, x.dim()), dims):
                sizes[2 * (x.dim() - 1 - d) + 1] = size - x.size(d)
            return F.pad(x, sizes, value=value)

        return PhraseTable(torch.cat([pad(self.tokens, NO_TOKEN, c, w), pad(other.tokens, NO_TOKEN, c, w)]),
                           torch.cat([pad(self.lengths, 0, c), pad(other.lengths, 0, c)]),
                           torch.cat([pad(self.live, False, c), pad(other.live, False, c)]),
                           torch.cat([self.ordered, other.ordered]), torch.cat([self.by_word, other.by_word]),
                           self.mid_word if self.mid_word is not None else other.mid_word)


@dataclass
class Progress:
    """Each row's (or candidate's: any leading shape R) progress through its sentence's phrases."""

    met: torch.Tensor  # (R, C) bool: phrases the row's output holds
    active: torch.Tensor  # (R,) long: the phrase the row is committed to (-1: free)
    done: torch.Tensor  # (R,) long: tokens of the active phrase produced so far (0 when free)
    run: torch.Tensor  # (R,) long: free tokens since the row's last phrase (at most L): phrases never overlap
    same: torch.Tensor  # (R,) long: rows of one sentence with equal ``same`` have produced the same tokens

    @staticmethod
    def start(rows: int, count: int) -> "Progress":
        zeros = torch.zeros(rows, dtype=torch.long)
        return Progress(torch.zeros(rows, count, dtype=torch.bool), zeros - 1, zeros, zeros.clone(), zeros.clone())

    def rows(self, order: torch.Tensor) -> "Progress":
        return Progress(self.met[order], self.active[order], self.done[order], self.run[order], self.same[order])

    def as_dict(self) -> dict[str, torch.Tensor]:
        return {"met": self.met, "active": self.active, "done": self.done, "run": self.run, "same": self.same}

    @staticmethod
    def of_dict(d: dict[str, torch.Tensor]) -> "Progress":
        return Progress(d["met"], d["active"], d["done"], d["run"], d["same"])

    def joined(self, other: "Progress") -> "Progress":
        c = max(self.met.size(1), other.met.size(1))
        met = [F.pad(m, (0, c - m.size(1)), value=False) for m in (self.met, other.met)]
        return Progress(torch.cat(met), *(torch.cat([getattr(self, name), getattr(other, name)])
                                          for name in ("active", "done", "run", "same")))


def glued(table: PhraseTable, sent: torch.Tensor, last: torch.Tensor) -> Optional[torch.Tensor]:
    """(R, L) bool: which of a row's ``last`` (R, L) generated tokens a word goes on after, so that no phrase may
    start right after it: for the rows of sentences that gave ``mid_word`` (False before a row's first token);
    None when no sentence did."""
    if table.mid_word is None:
        return None
    known = (last >= 0) & (last < table.mid_word.numel())  # columns before the first token hold -2
    return table.mid_word[last.clamp(0, table.mid_word.numel() - 1)] & known & table.by_word[sent].unsqueeze(1)


def first_open(table: PhraseTable, met: torch.Tensor, sent: torch.Tensor) -> torch.Tensor:
    """(R, C) bool: the phrases a free row (of sentence ``sent`` (R,), with ``met`` (R, C)) may meet next: every
    live unmet one, or the first of them when its sentence's phrases are ordered."""
    open_ = table.live[sent] & ~met  # (R, C)
    first = open_ & (open_.cumsum(1) == 1)  # (R, C) the first open phrase
    return torch.where(table.ordered[sent].unsqueeze(1), first, open_)


def needed(table: PhraseTable, p: Progress, sent: torch.Tensor) -> torch.Tensor:
    """(R, C) tokens each live unmet phrase still needs (the active one: the rest of it); a large number for the
    others."""
    lengths = table.lengths[sent]  # (R, C)
    own = F.one_hot(p.active.clamp(min=0), lengths.size(1)).bool() & (p.active >= 0).unsqueeze(1)  # (R, C)
    need = lengths - own.long() * p.done.unsqueeze(1)  # (R, C)
    return need.masked_fill(~(table.live[sent] & ~p.met), 1 << 40)


def can_meet_more(table: PhraseTable, p: Progress, sent: torch.Tensor, room: torch.Tensor) -> torch.Tensor:
    """(R,) bool: a row may still complete one more phrase in the ``room`` (R,) tokens it may generate."""
    need = needed(table, p, sent).masked_fill(~first_open(table, p.met, sent) & (p.active < 0).unsqueeze(1), 1 << 40)
    return (need <= room.unsqueeze(1)).any(1)


def best_unmet(table: PhraseTable, p: Progress, sent: torch.Tensor, room: torch.Tensor) -> torch.Tensor:
    """(R,) the fewest phrases a row can end up lacking, given the ``room`` (R,) tokens it may still generate:
    the shortest remaining phrases first (ordered: in their order)."""
    need = needed(table, p, sent)  # (R, C) large for the met ones and those not tried
    in_order = need.masked_fill(p.met, 0).cumsum(1)  # ordered: the phrases come in turn, the met ones first
    any_order = need.sort(1).values.cumsum(1)  # unordered: the shortest first
    ordered = table.ordered[sent]  # (R,)
    meetable = torch.where(ordered, ((in_order <= room.unsqueeze(1)) & ~p.met).sum(1),
                           (any_order <= room.unsqueeze(1)).sum(1))  # (R,)
    return unmet(table, p.met, sent) - meetable


def unmet(table: PhraseTable, met: torch.Tensor, sent: torch.Tensor) -> torch.Tensor:
    """(R,) phrases of its sentence a row's output lacks (those not tried included)."""
    return ((table.lengths[sent] > 0) & ~met).sum(1)


def forced(table: PhraseTable, p: Progress, sent: torch.Tensor, room: torch.Tensor, last: torch.Tensor,
           glue: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The constraint candidates of each row (R,), one per phrase: (token, allowed, its position in the phrase),
    each (R, C). A committed row's is its phrase's next token. A free row's, for each phrase it may meet next
    (``first_open``) and whose rest fits in its ``room`` (R,), is the token after the longest beginning of the phrase
    its output (``last`` (R, L): its last tokens) already ends with: mostly the phrase's first token; but a piece
    the row produced by itself is taken as the phrase's start, never produced a second time to reach it.

    With ``glue`` (R, L) (``glued`` of ``last``), a phrase starts only after a piece that ends a word, be it forced
    now or begun by the row's own tokens; and a row whose output ends with a beginning of the phrase glued to a
    word ("Fisch@@ markt") does not start the phrase at once, which would write those pieces twice ("markt
    markt"). A committed row goes on whatever its pieces."""
    width = table.tokens.size(2)
    tokens, lengths = table.tokens[sent], table.lengths[sent]  # (R, C, L), (R, C)
    own = torch.arange(table.count).unsqueeze(0) == p.active.unsqueeze(1)  # (R, C)
    free = (p.active < 0).unsqueeze(1)  # (R, 1)
    at = own.long() * p.done.unsqueeze(1)  # (R, C)
    written = torch.zeros_like(at)  # (R, C) the longest beginning of the phrase the output ends with (glue only)
    for j in range(1, width + 1):  # the phrase's first j tokens end the output: a loop over a phrase's length only
        ends = (last[:, width - j:].unsqueeze(1) == tokens[:, :, :j]).all(2) & free  # (R, C)
        ends &= (p.run >= j).unsqueeze(1)  # of free tokens after the last phrase only
        if glue is not None:
            written = written.masked_fill(ends & (j <= lengths), j)
            if j < width:  # begun where a word starts
                ends &= ~glue[:, width - 1 - j].unsqueeze(1)
        at = at.masked_fill(ends & (j < lengths), j)
    token = tokens.gather(2, at.unsqueeze(2)).squeeze(2)  # (R, C)
    starts = free & first_open(table, p.met, sent) & (lengths - at <= room.unsqueeze(1))
    if glue is not None:  # the piece before the phrase's start ends a word, and none of the phrase comes twice
        starts &= ~glue.gather(1, (width - 1 - at).clamp(min=0)) & (written <= at)
    return token, own | starts, at


def echoes(table: PhraseTable, p: Progress, sent: torch.Tensor, tail: torch.Tensor) -> torch.Tensor:
    """(R, L-1) bool: which of a free row's last tokens ``tail`` (R, L-1) it may not produce again now: a piece of a
    phrase it may meet next, among its last (that phrase's length - 1) free tokens. Without this, rows whose end is
    banned (they have phrases to meet) fall into loops of a phrase's piece ("Berg Berg Berg") that the phrase then
    completes, an output the length penalty can rank first; the phrase's piece comes once, and the phrase is
    then forced after it (``forced``)."""
    width = tail.size(1)
    lengths = table.lengths[sent]  # (R, C)
    recent = (p.run.unsqueeze(1).minimum(lengths - 1)).unsqueeze(2)  # (R, C, 1) free tokens looked back on
    back = torch.arange(width, 0, -1).view(1, 1, -1)  # (1, 1, L-1) how far back each tail column is
    piece = (tail.unsqueeze(1).unsqueeze(3) == table.tokens[sent].unsqueeze(2)).any(3)  # (R, C, L-1)
    open_ = first_open(table, p.met, sent) & (p.active < 0).unsqueeze(1)  # (R, C)
    return (piece & (back <= recent) & open_.unsqueeze(2)).any(1)


def advance(table: PhraseTable, p: Progress, sent: torch.Tensor, token: torch.Tensor, choice: torch.Tensor,
            at: torch.Tensor, tail: torch.Tensor, glue: Optional[torch.Tensor] = None) -> Progress:
    """The progress after each candidate (R,): its parent's ``p``, its ``token``, its ``choice`` (the phrase it
    produces a token of: the committed one, or one it starts; -1: a free token), the token's position ``at`` in that
    phrase (``forced``'s) and ``tail`` (R, L-1) the parent's last tokens (a free token that ends a phrase's
    spelling meets it too, when it starts where a word starts if ``glue`` (R, L), ``glued`` of the parent's last L
    tokens, says). ``same`` is left to the caller (it depends on the other candidates)."""
    count = table.count
    lengths = table.lengths[sent]  # (R, C)
    on = choice >= 0  # (R,)
    done = torch.where(on, at + 1, 0)  # (R,)
    length = lengths.gather(1, choice.clamp(min=0).unsqueeze(1)).squeeze(1)  # (R,)
    complete = on & (done == length)  # (R,)
    one_hot = F.one_hot(choice.clamp(min=0), count).bool()  # (R, C)
    met = p.met | (one_hot & complete.unsqueeze(1))
    active = torch.where(on & ~complete, choice, torch.full_like(choice, -1))
    done = done.masked_fill(complete, 0)
    # a free token may spell out a phrase by itself: the phrase is then the end of the output
    seq = torch.cat([tail, token.unsqueeze(1)], 1)  # (R, L)
    right = table.right[sent]  # (R, C, L)
    spelled = ((seq.unsqueeze(1) == right) | (right == NO_TOKEN)).all(2) & (lengths > 0)  # (R, C)
    spelled &= first_open(table, p.met, sent) & (~on).unsqueeze(1) & (lengths <= (p.run + 1).unsqueeze(1))
    if glue is not None:  # the piece before the spelling ends a word
        spelled &= ~glue.gather(1, (table.tokens.size(2) - lengths).clamp(0, table.tokens.size(2) - 1))
    spelled &= spelled.cumsum(1) == 1  # one phrase at a time (two equal phrases: two occurrences)
    run = torch.where(on | spelled.any(1), 0, (p.run + 1).clamp(max=table.tokens.size(2)))
    return Progress(met | spelled, active, done, run, p.same)


def bank(table: PhraseTable, p: Progress, sent: torch.Tensor) -> torch.Tensor:
    """(R,) constraint tokens a row has produced (met phrases' and the committed one's so far): its bank."""
    return (table.lengths[sent] * p.met.long()).sum(1) + p.done
