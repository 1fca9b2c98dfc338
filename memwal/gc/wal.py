"""The WAL collector: gate (e), decided from what GC already knows.

A WAL entry goes when every generation it may belong to is deletable and it is not past the
shard manifest's ``replay_after_wal_entry_position``; one past it whose generation goes is
kept on purpose (``wal-needed-for-replay``). A fence sentinel (no generation) goes as
:func:`sentinel_may_go` says (docs/decisions/0001-fence-sentinels.md).

What places an entry without reading it: a writer appends WAL entries in position order and
a MemTable's entries before the next one's (the spec: "Writer must flush WAL entries in
sequential order"), so generations never decrease along the positions, and everything at
or below ``replay_after`` was flushed (its generation is listed in the manifest). An entry
between two entries whose generations are known belongs to a generation between them: when
every flushed generation there is deletable, it goes; when none is, it stays. Only where the
answer is open is a header read (a ranged GET), and each is remembered
(:mod:`memwal.table.wal_digest`): where deletable and kept generations meet, a binary search;
past ``replay_after``, the first entry; and every entry small enough to be a fence sentinel
(or a damaged entry: reading it refuses the run, exit 2, before anything is written). Headers
that contradict the order make the shard's every header be read.

Generations drained from the manifest (:mod:`memwal.gc.drain`) are still flushed ones: the
placement counts every generation below ``current_generation``. A Lance 9 writer
(lance-context) names no generation in its headers: such an entry is placed by its position
alone, and one whose generations are not all deletable stays (``wal-generation-unknown``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from memwal.gc.gates import FENCE_SENTINEL, WAL_GENERATION_UNKNOWN, WAL_NEEDED_FOR_REPLAY
from memwal.gc.model import Deletable, KeptWal, Numbers, WalDeletion
from memwal.store import Store
from memwal.table.listing import ShardListing, WalEntry
from memwal.table.shards import UNLABELLED, ShardState, read_wal_entry_metas
from memwal.table.wal_digest import Header, WalDigest

#: An entry this small may be a fence sentinel (an empty schema and its metadata: about 200
#: bytes); a data entry holds a schema with fields and at least one batch. Such entries are read.
SENTINEL_MAX_BYTES = 1024

_UNBOUNDED = 1 << 62


@dataclass(frozen=True)
class WalPlan:
    """The WAL entries one plan deletes and keeps on purpose, and every header it knows."""

    deletions: tuple[WalDeletion, ...] = ()
    kept: tuple[KeptWal, ...] = ()
    headers: Mapping[str, Header] = field(default_factory=dict)
    headers_read: int = 0


def sentinel_may_go(entry: WalEntry, epoch: int, state: ShardState, expire_before: float | None) -> bool:
    """Whether a fence sentinel may be deleted (docs/decisions/0001-fence-sentinels.md).

    A sentinel stops one writer: the one its epoch superseded, whose next append lands on
    its position and fails as fenced (pylance 14 checks the epoch only then, or at a flush).
    Storage never shows that writer gone, so a sentinel goes only under the bound the table
    already assumes for writers of older state, the version expiry: it must be of an older
    epoch than the shard's writer now (the newest sentinel always stays), at or below
    ``replay_after`` (replay never reads it), and written before the plan's expiry cut-off
    (none with ``--expire-versions never``: every sentinel stays).
    """
    return (expire_before is not None and epoch < state.writer_epoch
            and entry.position <= state.replay_after_wal_entry_position and entry.mtime < expire_before)


def plan_shard_wal(store: Store, state: ShardState, listed: ShardListing, deletable: Deletable,
                   expire_before: float | None, digest: WalDigest) -> WalPlan:
    """The WAL entries of one shard that go, and those kept on purpose (see the module docstring)."""
    entries = list(listed.wal)
    known = {i: h for i, e in enumerate(entries) if (h := digest.get(e.key, e.etag)) is not None}
    if not entries or (not deletable and expire_before is None):
        return WalPlan(headers={entries[i].key: h for i, h in known.items()})
    reads = _Reads(store, state.shard_id, entries, known)
    reads.read([i for i, e in enumerate(entries) if i not in known and e.size <= SENTINEL_MAX_BYTES])
    flushed = flushed_numbers(state)
    spans = _Placement(entries, known, flushed, deletable, state.replay_after_wal_entry_position)
    while True:
        if not spans.ordered():
            reads.read([i for i in range(len(entries)) if i not in known])
        probes = spans.probes()
        if not probes:
            break
        reads.read(probes)
    return spans.plan(state, expire_before, reads)


def flushed_numbers(state: ShardState) -> Numbers:
    """Every generation the shard has flushed, listed or drained since: generations are
    numbered from 1 and ``current_generation`` is the next to flush (a rule, not a list)."""
    return Numbers(state.current_generation, frozenset(g.generation for g in state.flushed))


class _Reads:
    """Header reads of one shard's entries, by index (``known`` grows as they come)."""

    def __init__(self, store: Store, shard_id: str, entries: list[WalEntry], known: dict[int, Header]) -> None:
        self.store, self.shard_id, self.entries, self.known, self.count = store, shard_id, entries, known, 0

    def read(self, indexes: Sequence[int]) -> None:
        if not indexes:
            return
        metas = read_wal_entry_metas(self.store, self.shard_id, [self.entries[i].position for i in indexes])
        for i, meta in zip(indexes, metas, strict=True):
            if meta is None:  # listed and gone since: a concurrent GC (the plan is made again)
                raise self.store.not_found(self.entries[i].key)
            self.known[i] = Header(self.entries[i].etag, meta.generation, meta.writer_epoch)
        self.count += len(indexes)


class _Placement:
    """The generations each unread data entry may belong to, from the known ones around it."""

    def __init__(self, entries: list[WalEntry], known: dict[int, Header], flushed: Numbers,
                 deletable: Deletable, replay_after: int) -> None:
        self.entries, self.known, self.flushed = entries, known, flushed
        self.deletable, self.replay_after = deletable, replay_after
        self.top = flushed.top

    def generation(self, i: int) -> int | None:
        """The generation entry ``i``'s header names (None: unread, a sentinel, or unlabelled)."""
        h = self.known.get(i)
        return h.generation if h is not None and h.generation != UNLABELLED else None

    def ordered(self) -> bool:
        """Whether the known generations never decrease along the positions (as writers write them)."""
        gens = [g for i in sorted(self.known) if (g := self.generation(i)) is not None]
        return all(a <= b for a, b in zip(gens, gens[1:], strict=False))

    def spans(self) -> dict[int, tuple[int, int]]:
        """Per data entry (not a known sentinel): the generations it may belong to, exactly one
        when its header is known, else those between its known neighbours."""
        data = [i for i in range(len(self.entries)) if not (i in self.known and self.known[i].generation is None)]
        named = [self.generation(i) for i in data]  # asked once: a week keeps tens of thousands of entries
        out: dict[int, tuple[int, int]] = {}
        lo = 0
        for i, g in zip(data, named, strict=True):
            if g is not None:
                lo = g
            out[i] = (g, g) if g is not None else (lo, 0)
        hi = _UNBOUNDED
        for i, g in zip(reversed(data), reversed(named), strict=True):
            if g is not None:
                hi = g
                continue
            top = min(hi, self.top) if self.entries[i].position <= self.replay_after else hi  # flushed: in the manifest
            out[i] = (out[i][0], top)
        return out

    def verdict(self, position: int, lo: int, hi: int, exact: bool) -> bool | None:
        """True: its generation goes; False: it stays with its generation; None: open (read it)."""
        if max(lo, 1) > self.deletable.top:  # generations are numbered from 1
            return False
        going = self.deletable.count_in(self.flushed, lo, hi)
        if not going:
            return False
        if exact or (position <= self.replay_after and going == self.flushed.count(lo, hi)):
            return True
        return None  # past replay_after the report names its generation: read it

    def probes(self) -> list[int]:
        """One unread entry to read in each run of open ones: the middle of a run at or below
        replay_after (a binary search for where deletable generations end), the first past it."""
        picks: list[int] = []
        run: list[int] = []
        for i, (lo, hi) in [*self.spans().items(), (-1, (0, 0))]:
            if i >= 0 and i not in self.known and self.verdict(self.entries[i].position, lo, hi, False) is None:
                run.append(i)
                continue
            if run:
                past = self.entries[run[0]].position > self.replay_after
                picks.append(run[0] if past else run[len(run) // 2])
                run = []
        return picks

    def plan(self, state: ShardState, expire_before: float | None, reads: _Reads) -> WalPlan:
        sid = state.shard_id
        deletions: list[WalDeletion] = []
        kept: list[KeptWal] = []
        spans = self.spans()
        for i, e in enumerate(self.entries):
            h = self.known.get(i)
            if h is not None and h.generation is None:
                if sentinel_may_go(e, h.writer_epoch, state, expire_before):
                    deletions.append(WalDeletion(sid, e.position, e.key, e.size, None))
                else:
                    kept.append(KeptWal(sid, e.position, None, FENCE_SENTINEL))
                continue
            lo, hi = spans[i]
            exact = self.generation(i) is not None
            goes = self.verdict(e.position, lo, hi, exact)
            if goes is None and h is not None:  # unlabelled: no read can place it closer
                kept.append(KeptWal(sid, e.position, None, WAL_GENERATION_UNKNOWN))
                continue
            if not goes:
                continue  # kept with its generation, which is reported blocked
            span = (lo, lo) if exact else self.flushed.first_last(lo, hi)
            if e.position > self.replay_after:
                kept.append(KeptWal(sid, e.position, lo, WAL_NEEDED_FOR_REPLAY))
            elif span is not None:
                deletions.append(WalDeletion(sid, e.position, e.key, e.size, span))
        return WalPlan(tuple(deletions), tuple(kept), {self.entries[i].key: h for i, h in self.known.items()},
                       reads.count)
