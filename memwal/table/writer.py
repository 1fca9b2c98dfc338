"""Is a shard's writer live, and since when does it hold its view? Told from storage alone.

Both clients our users run keep the base table version they opened for as long as the
process lives, and add to it every generation the shard manifest lists
(docs/decisions/0025-drain-protocol.md: observed, pylance 14's ``ShardWriter`` and its
``lsm_scanner()``, lance-context 0.6.7). Such a process therefore needs every generation
merged after it opened to stay listed, and its opened version to stay on storage. Nothing on
storage says a process is alive, so:

* **live**: the shard's writer wrote within ``writer_idle`` seconds: a WAL entry, or a
  manifest version that is not a drain (a flush, a claim). Quiet longer than that, it is
  presumed gone, and a process still holding the table must reopen it before it reads. A writer
  that was closed leaves no trace a quiet one does not (observed, pylance 14.0.2: ``close()``
  flushes its MemTable as a last generation and writes an ordinary manifest version, status
  ``ACTIVE``, replay position at the last WAL entry, as any flush of an idle writer does), so a
  closed writer counts as live until the idle period passes, unless someone who knows says it
  was closed (:mod:`memwal.table.writers_closed`); the wait is named where it is shown
  (``writer-live``), with the setting that shortens it and the command that says so.
* **claimed at**: when the writer epoch in the latest manifest was claimed (the first
  version with that epoch). pylance claims at ``mem_wal_writer()``, right after the caller
  opened the table, so its view is no older than the claim, less the grace period a caller
  may take between the two. (lance-context claims at its first write: a store opened long
  before it writes must reopen; docs/decisions/0025.) Older epochs are fenced: pylance refuses
  their reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from memwal.errors import MemWalError, NotFoundError
from memwal.store import ObjectInfo, Store
from memwal.table.drain import is_compaction
from memwal.table.listing import MemWalListing, ShardListing
from memwal.table.naming import manifest_key
from memwal.table.shards import ShardState, decode_shard_manifest
from memwal.table.writers_closed import ClosedRecords, ClosedWriter

#: Compactor versions (drains, rollups) walked back over to find the writer's own last manifest
#: version; past this many in a row the shard counts as live (a guess on the safe side).
_MAX_DRAINS_WALKED = 32


class StatOnUse(Mapping[int, ObjectInfo]):
    """A shard's manifest versions from a listing of their names (``versions``, as
    :func:`memwal.table.shards.read_shard_manifests` found them), each stat-ed when first asked.

    GC's listing pass (a follower's, after every merge) asks for a few: the writer's last versions,
    its claim (a binary search). A listing with a stat of every version cost it more than the rest
    of its walk beside a writer that never reopens (some 50 versions a minute since its claim). On a
    disk only, where a stat is a system call; an object store's listing has the times already. A
    version gone between the listing and its stat (pruned by a concurrent GC) is NotFoundError: the
    plan is made again (:func:`memwal.gc.plan.plan_gc_settled`)."""

    def __init__(self, store: Store, shard_id: str, versions: Iterable[int]) -> None:
        self.store, self.shard_id = store, shard_id
        self._order = tuple(sorted(set(versions)))
        self._versions = frozenset(self._order)
        self._infos: dict[int, ObjectInfo] = {}

    def __getitem__(self, version: int) -> ObjectInfo:
        if version not in self._versions:
            raise KeyError(version)
        if version not in self._infos:
            key = manifest_key(self.shard_id, version)
            info = self.store.head(key)
            if info is None:
                raise NotFoundError(f"{self.store.uri_for(key)}: gone since the listing")
            self._infos[version] = info
        return self._infos[version]

    def __iter__(self) -> Iterator[int]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._versions)

    def __contains__(self, version: object) -> bool:
        return version in self._versions


class ManifestHistory:
    """A shard's manifest versions as one listing found them, each read at most once."""

    def __init__(self, store: Store, latest: ShardState, versions: Mapping[int, ObjectInfo]) -> None:
        self.store, self.latest, self.versions = store, latest, versions
        self._read: dict[int, ShardState] = {latest.version: latest}

    def mtime(self, version: int) -> float:
        return self.versions[version].mtime

    def at(self, version: int) -> ShardState:
        """The decoded version (MemWalError when unreadable or gone)."""
        if version not in self._read:
            info = self.versions[version]
            data = self.store.get(info.key)
            self._read[version] = decode_shard_manifest(data, shard_id=self.latest.shard_id, version=version,
                                                        where=self.store.uri_for(info.key), mtime=info.mtime)
        return self._read[version]

    def newest_before(self, when: float) -> int | None:
        """The newest listed version written at or before ``when`` (None: all are newer)."""
        old = [v for v, o in self.versions.items() if o.mtime <= when and v <= self.latest.version]
        return max(old) if old else None


@dataclass(frozen=True)
class WriterView:
    """What storage tells of a shard's writer (see the module docstring)."""

    shard_id: str
    epoch: int
    last_activity: float | None
    live: bool
    #: When the current epoch was claimed; None when unknown or not looked for.
    claimed_at: float | None = None
    #: The generation folders the writer's own newest manifest version lists (None: unknown).
    #: A live writer reads what its memory lists, which it reloads only when it writes a
    #: version (a flush, or its claim): a folder it still lists must stay.
    own_paths: frozenset[str] | None = None
    #: When a live writer that writes nothing more counts as gone (its last write + the idle period).
    quiet_at: float | None = None
    #: The record saying this writer, as it is, was closed (:mod:`memwal.table.writers_closed`): not live.
    closed: ClosedWriter | None = None

    def may_list(self, path: str) -> bool:
        """Whether the writer may still list the folder ``path`` in its memory."""
        return self.live and (self.own_paths is None or path in self.own_paths)

    def opened_after(self, when: float | None, grace_seconds: float) -> bool:
        """Whether the live writer's view surely includes what was committed at ``when``: it
        claimed its epoch at least the grace period after it."""
        return when is not None and self.claimed_at is not None and self.claimed_at - grace_seconds >= when

    def claimed_before(self, when: float | None) -> bool:
        """Whether the writer claimed its epoch before ``when`` (False when either is unknown)."""
        return when is not None and self.claimed_at is not None and self.claimed_at < when

    def to_dict(self) -> dict[str, object]:
        return {"shard_id": self.shard_id, "epoch": self.epoch, "live": self.live,
                "last_activity": self.last_activity, "claimed_at": self.claimed_at, "quiet_at": self.quiet_at,
                "closed": None if self.closed is None else self.closed.to_dict()}


def writer_view(history: ManifestHistory, listed: ShardListing, *, now: float, idle_seconds: float,
                claim: bool = False, walk: bool = True, ours: frozenset[int] = frozenset(),
                closed: Callable[[], ClosedWriter | None] | None = None) -> WriterView:
    """The shard's writer as storage shows it; ``claim`` also finds when its epoch was claimed
    (a few manifest reads, only for a live writer). ``walk=False`` reads nothing more than the
    listing and the latest manifest (``memwal status``, which shows liveness, never decides on
    it): the writer's activity is then its newest WAL entry, when the WAL was listed (every put
    and every claim writes one before its manifest version; a compactor's drain or rollup writes
    none), and the newest manifest version the listing shows that is not among ``ours``, the
    versions memwal's GC wrote (:mod:`memwal.table.compactions`). ``closed``: the record saying the
    shard's writer was closed, asked only of a writer that would be live (a read of the store): it
    counts when it names this epoch and nothing was written since (not live then)."""
    state = history.latest
    times = [e.mtime for e in listed.wal]
    own = _last_written(history, now, idle_seconds) if walk else _newest_not_ours(history, ours)
    if own is not None:
        times.append(history.mtime(own))
    elif walk and state.version in history.versions:  # unknown: the latest counts as the writer's (live, if recent)
        times.append(history.mtime(state.version))
    last = max(times) if times else None
    live = last is not None and now - last < idle_seconds
    said = closed() if live and closed is not None else None
    said = said if said is not None and said.covers(state.writer_epoch, last) else None
    if not live or said is not None:
        return WriterView(state.shard_id, state.writer_epoch, last, False, closed=said)
    paths = None
    if own is not None and walk:  # what its memory lists: GC's question only (status reads nothing more)
        try:
            paths = frozenset(s.path for s in history.at(own).manifest.sstables)
        except (MemWalError, OSError):
            paths = None
    return WriterView(state.shard_id, state.writer_epoch, last, True, _claimed_at(history) if claim else None, paths,
                      None if last is None else last + idle_seconds)


def shard_writers(store: Store, listing: MemWalListing, states: Mapping[str, ShardState], *, now: float,
                  idle_seconds: float) -> tuple[dict[str, ManifestHistory], dict[str, WriterView]]:
    """Per shard, its manifest history and its writer as GC judges it (when the live one claimed its
    epoch, and the closed-writer record read for a writer that would be live): GC's plan and
    ``memwal writers`` ask the same question of the same listing."""
    histories = {sid: ManifestHistory(store, st, listing.shards[sid].manifests) for sid, st in states.items()}
    closed = ClosedRecords(store)
    return histories, {sid: writer_view(h, listing.shards[sid], now=now, idle_seconds=idle_seconds, claim=True,
                                        closed=closed.of(sid)) for sid, h in histories.items()}


def _last_written(history: ManifestHistory, now: float, idle_seconds: float) -> int | None:
    """The version the writer wrote last: the newest one that is not a drain (None: unknown,
    or more drains in a row than are walked: then the latest counts as the writer's)."""
    v = history.latest.version
    if v not in history.versions:
        return None
    for _ in range(_MAX_DRAINS_WALKED):
        if now - history.mtime(v) >= idle_seconds or v - 1 not in history.versions:
            return v  # older than the bound: whatever wrote it, the shard is quiet
        try:
            drained = is_compaction(history.at(v - 1).manifest, history.at(v).manifest)
        except MemWalError:
            return v
        if not drained:
            return v
        v -= 1
    return None


def _newest_not_ours(history: ManifestHistory, ours: frozenset[int]) -> int | None:
    """The newest listed version GC did not write (no read: the listing and GC's record)."""
    mine = [v for v in history.versions if v <= history.latest.version and v not in ours]
    return max(mine) if mine else None


def _claimed_at(history: ManifestHistory) -> float | None:
    """When the latest epoch was first written: a binary search over the listed versions
    (epochs never decrease along versions); None when a version on the way is unreadable."""
    epoch = history.latest.writer_epoch
    versions = sorted(v for v in history.versions if v <= history.latest.version)
    lo, hi = 0, len(versions) - 1
    try:
        while lo < hi:
            mid = (lo + hi) // 2
            if history.at(versions[mid]).writer_epoch < epoch:
                lo = mid + 1
            else:
                hi = mid
        return history.mtime(versions[lo]) if versions else None
    except (MemWalError, OSError):
        return None


__all__ = ["ManifestHistory", "StatOnUse", "WriterView", "writer_view"]
