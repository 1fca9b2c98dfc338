"""What moved in a table's shards since the follower last looked, found cheaply.

A writer that flushes a generation writes its shard's next manifest version, then the shard's
``version_hint.json`` (``{"version": N}``). Reading the hints is one small GET per shard (a file
read on a disk), far cheaper than a merge plan, so the follower reads them every poll and plans
a merge only for a table whose hints moved. The hint is written best-effort after the manifest:
it may lag, be missing or be garbage. So it is only a *hint* that something moved: every
``rescan_seconds`` the follower lists the shards and their manifests (new shards, a hint that
lags), and a hint it cannot read is replaced by that shard's listing at once. A spurious change
costs one merge plan (reads only); a missed one, at most a rescan interval.

The poll backs off while nothing moves and comes back to ``poll_seconds`` at the first change: the
delay is half the time since a shard last moved, between ``poll_seconds`` and ``max_poll_seconds``.
A writer that never stops keeps it at the fastest rate, an idle table costs a request per shard
every ``max_poll_seconds``. The backoff follows time, not looks: a follower looks again at once
after each job it ran (a bounded batch may have left more), and a delay doubled at each look
slept 4 s after a merge and its listing pass that moved nothing, while a writer flushed every
1.7 s (two or three generations listed the longer: the listing's sawtooth in docs/benchmarks/keeping-up.md).

A shard whose newest manifest cannot be read (truncated, corrupt, a gap among the newest
versions: :class:`~memwal.table.shards.ShardManifestError`) is said once, at the look that found
it, and again once when it reads again; meanwhile it is looked at only by the rescan (it backs off
to ``rescan_seconds``) and it is no move: the follower merges the other shards. The rescan reads
each shard's newest manifest, not only its name, when a HEAD of it shows what it last read
changed (or its version is new): a newest manifest cut short in place moves no name and no hint,
and a follower that only listed names looked 31 times in 13 s without a word (issue 83).

A look that finds a shard's manifests gone, or a shard gone, makes the table :attr:`suspect`: the
follower then checks that the table itself is still there (:func:`memwal.lease.guard.table_gone`).

A shard moved only by this process's own GC (a rollup or a drain: the one version after the last
seen is the one it wrote, :func:`memwal.table.drain.written_here`) did not move for the follower:
it planned a merge after each listing pass that found nothing, one flush in two, at a cost that
grows with the shard's manifest versions. A writer's version after it is a move, as ever.
"""

from __future__ import annotations

import logging

from memwal.core.pool import parallel_map
from memwal.errors import MemWalError
from memwal.store import LocalStore, Store
from memwal.table.drain import written_here
from memwal.table.naming import manifest_key
from memwal.table.shards import (
    ShardManifestError,
    hinted_shard_version,
    latest_shard_version,
    list_shard_ids,
    read_shard_manifest,
)

log = logging.getLogger(__name__)

#: Shards read at once on an object store (latency bound); a disk reads them in turn.
_THREADS = 16
#: What a shard whose latest manifest cannot be established reads as: it differs from every
#: version, so the merge plans it and reports it (the follower never decides that itself).
BROKEN = -1


class ShardWatch:
    """Each shard's last seen manifest version, and which moved since (see the module docstring)."""

    def __init__(self, store: Store, *, poll_seconds: float, max_poll_seconds: float, rescan_seconds: float) -> None:
        self.store = store
        self.poll_seconds = poll_seconds
        self.max_poll_seconds = max_poll_seconds
        self.rescan_seconds = rescan_seconds
        self.seen: dict[str, int] = {}
        self.delay = poll_seconds
        self._next_rescan: float | None = None
        #: When a look last found a shard moved (the backoff's origin).
        self._moved_at: float | None = None
        #: Requests made so far (a listing of the shards counts one, each shard's listing one).
        self.requests = 0
        #: Shards whose newest manifest cannot be read now, and why (said once: the module docstring).
        self.broken: dict[str, str] = {}
        #: Each shard's newest manifest as the rescan last read it whole: (version, size, ETag).
        self._read_ok: dict[str, tuple[int, int, str]] = {}
        #: Whether the last look found a shard's manifests, or a shard, gone (the table may be).
        self.suspect = False
        #: Why each shard read as BROKEN in the look under way.
        self._why: dict[str, str] = {}

    def look(self, now: float) -> set[str]:
        """The shards whose manifest moved since the last look (the first look: every shard), and
        the next delay set: ``poll_seconds`` after a change, then half the time nothing moved (up to
        ``max_poll_seconds``), however many looks that time held."""
        if self._next_rescan is None or now >= self._next_rescan:
            versions = self._rescan()
            self._next_rescan = now + self.rescan_seconds
        else:
            versions = self._hints()
        self.suspect = any(self.seen.get(sid, 0) > 0 >= v for sid, v in versions.items()) or bool(
            set(self.seen) - set(versions))
        self._say_broken(versions)
        moved = {sid for sid, v in versions.items()
                 if self.seen.get(sid) != v and v != BROKEN and not self._ours(sid, v)}
        self.seen = versions
        if moved or self._moved_at is None:
            self._moved_at = now
        self.delay = min(self.max_poll_seconds, max(self.poll_seconds, (now - self._moved_at) / 2))
        return moved

    def _ours(self, shard_id: str, version: int) -> bool:
        """Whether ``version`` is the only one since the last look, and this process wrote it."""
        return self.seen.get(shard_id) == version - 1 and written_here(self.store, shard_id) == version

    def check(self, shard_id: str) -> bool:
        """Read the shard's newest manifest now, a job having failed naming it: whether it is
        broken (then said, once, as a look would have). A job may meet a newest manifest cut short
        before the rescan does, and the follower says what broke in one line, the watch's."""
        if shard_id in self.broken:
            return True
        self._why = {}
        version = self._validated(shard_id)
        if version == BROKEN:
            self.seen[shard_id] = BROKEN  # no move; reading again later is one
            self._say_broken({shard_id: BROKEN})
        return version == BROKEN

    def _say_broken(self, versions: dict[str, int]) -> None:
        """Say once that a shard's newest manifest cannot be read, and once that it reads again."""
        for sid in sorted(self.broken):
            if versions.get(sid, BROKEN) not in (BROKEN, 0):
                log.info("%s: shard %s reads again (manifest version %d): merging it", self.store.root, sid,
                         versions[sid])
                del self.broken[sid]
        for sid, why in sorted(self._why.items()):
            if versions.get(sid) == BROKEN and sid not in self.broken:
                self.broken[sid] = why
                log.warning("%s: shard %s cannot be read (%s): the other shards are merged; it is looked at "
                            "again every %gs", self.store.root, sid, why, self.rescan_seconds)
        self._why = {}

    def _rescan(self) -> dict[str, int]:
        self.requests += 1
        shards = list_shard_ids(self.store)
        return dict(zip(shards, parallel_map(self._validated, shards, self._threads()), strict=True))

    def _hints(self) -> dict[str, int]:
        """Each shard's hint; a broken shard keeps its state until the next rescan (its backoff)."""
        shards = sorted(sid for sid in self.seen if sid not in self.broken)
        versions = dict(zip(shards, parallel_map(self._hinted, shards, self._threads()), strict=True))
        return {**{sid: BROKEN for sid in self.broken if sid in self.seen}, **versions}

    def _validated(self, shard_id: str) -> int:
        """The shard's latest version by listing, its newest manifest read whole when a HEAD shows
        it is not the one the last rescan read (a manifest is read once, however often listed)."""
        version = self._listed(shard_id)
        if version <= 0:
            return version
        key = manifest_key(shard_id, version)
        self.requests += 1
        info = self.store.head(key)
        mark = (version, info.size, info.etag) if info is not None else None
        if mark is not None and self._read_ok.get(shard_id) == mark:
            return version
        self.requests += 1
        try:
            read_shard_manifest(self.store, shard_id, version)
        except (MemWalError, OSError) as exc:
            self._read_ok.pop(shard_id, None)
            self._why[shard_id] = f"latest manifest version {version} is unreadable: {exc}"
            return BROKEN
        if mark is not None:
            self._read_ok[shard_id] = mark
        return version

    def _threads(self) -> int:
        return 1 if isinstance(self.store, LocalStore) else _THREADS

    def _listed(self, shard_id: str) -> int:
        """The shard's latest manifest version by listing (exact), or :data:`BROKEN`."""
        self.requests += 1
        try:
            return latest_shard_version(self.store, shard_id)
        except ShardManifestError as exc:
            self._why[shard_id] = exc.detail
            return BROKEN

    def _hinted(self, shard_id: str) -> int:
        """The shard's version hint; its listing when the hint cannot be read or makes no sense."""
        self.requests += 1
        version = hinted_shard_version(self.store, shard_id)
        if version is None:
            log.debug("shard %s: version hint unreadable: listed instead", shard_id)
            return self._listed(shard_id)
        return version


__all__ = ["BROKEN", "ShardWatch"]
