"""The indexes behind :meth:`memwal.merge.cover.Cover.receipt_point`, each built once per proof.

A proof judges every generation a GC run or ``memwal verify`` keeps, and each asks for the receipt
that vouches for it, after its covering version or, when coverage began at a version expired
since, before it. Asked of the whole listing each time, that was generations times receipts (61.9 s
at 7,326 generations, issue 82). Here: the versions to walk after a cover (:class:`Walks`), the
newest version below one whose mark is under a generation (:class:`PrefixMin`), and the walk back
through expired versions, resumed between generations (:class:`BackWalk`, :class:`FirstCover`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from memwal.history.receipts import EVIDENCE, MERGE, Receipt, ReceiptListing
from memwal.table.retained import RetainedVersion


@dataclass(frozen=True)
class Walks:
    """What :meth:`Cover.receipt_point` walks after and before a covering version, built once per
    proof from the listing's evidence (:attr:`ReceiptListing.evidence`) and the retained versions."""

    #: Retained main-line versions with a receipt whose key is not a merge's, ascending.
    later: list[int]
    #: Those receipts' keys, per version, in the listing's order.
    later_keys: dict[int, tuple[str, ...]]
    #: Versions with evidence that no retained main-line version has (expired), ascending.
    expired: list[int]
    #: Their evidence keys, per version, in the listing's order.
    expired_keys: dict[int, tuple[str, ...]]

    @classmethod
    def build(cls, receipts: ReceiptListing, retained: Mapping[int, RetainedVersion]) -> Walks:
        later_keys: dict[int, tuple[str, ...]] = {}
        expired_keys: dict[int, tuple[str, ...]] = {}
        for version, keys in receipts.evidence.items():  # ascending
            if version not in retained:
                expired_keys[version] = keys
                continue
            # the same test as a walk that skips merges after the covering version: the key's name
            not_merges = tuple(key for key in keys if f"-{MERGE}." not in key)
            if not_merges:
                later_keys[version] = not_merges
        return cls(list(later_keys), later_keys, list(expired_keys), expired_keys)


#: Above any mark (a 63-bit generation number).
NO_MARK = 1 << 64


class PrefixMin:
    """A range-minimum tree over the marks of the main-line versions (one shard), ascending by
    version: the last version before a given one whose mark is below ``g``, in O(log n). The marks
    are not monotone (a ``restore`` commits an older manifest again), so no bisection of the marks
    alone can answer it."""

    def __init__(self, marks: Sequence[int]) -> None:
        self.n = len(marks)
        self.size = 1
        while self.size < self.n:
            self.size *= 2
        # the padding is past every prefix asked, and above every mark
        self.tree = [NO_MARK] * self.size + list(marks) + [NO_MARK] * (self.size - self.n)
        for i in range(self.size - 1, 0, -1):
            self.tree[i] = min(self.tree[2 * i], self.tree[2 * i + 1])

    def last_below(self, k: int, g: int) -> int:
        """The largest index ``i < k`` whose mark is below ``g`` (-1: none)."""
        return self._last(1, 0, self.size, min(k, self.n), g)

    def _last(self, node: int, lo: int, hi: int, k: int, g: int) -> int:
        # One node per level straddles ``k``; a node inside the prefix whose minimum is below
        # ``g`` holds the answer, found by one descent (right child first): O(log n) nodes.
        if lo >= k or self.tree[node] >= g:
            return -1
        if hi - lo == 1:
            return lo
        mid = (lo + hi) // 2
        right = self._last(2 * node + 1, mid, hi, k, g)
        return right if right >= 0 else self._last(2 * node, lo, mid, k, g)


class FirstCover:
    """Per generation of one shard, the first receipt (in a walk's order) whose span names it:
    disjoint labelled ranges, and the union of every span painted so far (merged), so that a span
    paints only the gaps it finds, each range of the union merged away once: amortised O(log n) a
    span, however the spans overlap (storage is untrusted input: a planted receipt may name any range)."""

    def __init__(self) -> None:
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.at: list[int] = []
        self.union_lo: list[int] = []
        self.union_hi: list[int] = []

    def find(self, g: int) -> int | None:
        i = bisect_right(self.lo, g) - 1
        return self.at[i] if i >= 0 and g <= self.hi[i] else None

    def paint(self, lo: int, hi: int, at: int) -> None:
        """Label ``at`` every generation of ``lo``..``hi`` that has no label yet."""
        if lo > hi:
            return
        a = bisect_left(self.union_hi, lo - 1)  # the union's ranges that touch lo..hi: a..b-1
        b = bisect_right(self.union_lo, hi + 1)
        cur = lo
        for k in range(a, b):
            if self.union_lo[k] > cur:
                self._label(cur, self.union_lo[k] - 1, at)
            cur = max(cur, self.union_hi[k] + 1)
        if cur <= hi:
            self._label(cur, hi, at)
        merged_lo = min(lo, self.union_lo[a]) if a < b else lo
        merged_hi = max(hi, self.union_hi[b - 1]) if a < b else hi
        self.union_lo[a:b] = [merged_lo]
        self.union_hi[a:b] = [merged_hi]

    def _label(self, lo: int, hi: int, at: int) -> None:
        i = bisect_left(self.lo, lo)
        self.lo.insert(i, lo)
        self.hi.insert(i, hi)
        self.at.insert(i, at)


class BackWalk:
    """The walk of :meth:`Cover.receipt_point` through receipts at expired versions, newest
    first, from one starting point (the versions expired before a covering version), kept across
    the generations asked: every receipt it reads is read once and labels the generations it
    names (:class:`FirstCover`), so a generation asked later is answered by a lookup, and the walk
    goes on only past what it has read, as far as the first receipt that names the generation
    (as a walk from the start would: the same receipts read, in the same order)."""

    def __init__(self, walks: Walks, start: int, read: Callable[[str], Receipt | None]) -> None:
        self.walks, self.read = walks, read
        self.at = start - 1  # the expired version read next (index into walks.expired); -1: none left
        self.key = 0  # and its next key
        self.first: dict[str, FirstCover] = {}

    def point(self, shard_id: str, g: int, floor: int) -> int | None:
        """The newest expired version above ``floor`` (and before the start) with an evidence receipt
        that names ``g`` (None: none does)."""
        seen = self.first.get(shard_id)
        found = None if seen is None else seen.find(g)
        if found is not None:  # everything from the start down to it is read: it is the first
            return found if found > floor else None
        expired = self.walks.expired
        while self.at >= 0 and expired[self.at] > floor:
            version = expired[self.at]
            keys = self.walks.expired_keys[version]
            while self.key < len(keys):
                r = self.read(keys[self.key])
                self.key += 1
                if r is None or r.kind not in EVIDENCE:
                    continue
                for sid, (lo, hi) in r.applied.items():
                    self.first.setdefault(sid, FirstCover()).paint(lo, hi, version)
                if r.covers(shard_id, g):
                    return r.version
            self.at -= 1
            self.key = 0
        return None


__all__ = ["NO_MARK", "BackWalk", "FirstCover", "PrefixMin", "Walks"]
