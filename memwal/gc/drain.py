"""The drain collector: merged generations leave the shard manifest before their folders go.

A generation folder is deleted only once no current shard manifest lists it and no reader
within the grace period can still hold a version that did (hazard H6: every client reads
every listed generation and fails on a missing one). So GC first *drains*: it takes the
generations every gate lets go out of the manifest (:func:`write_compaction`),
then deletes their folders once the drain is older than the grace period (in the same run
with ``--grace-seconds 0``).

A live writer holds a view that needs them (:mod:`memwal.table.writer`): a generation is
drained while its shard's writer is live only if that writer claimed its epoch at least the
grace period after the generation's merge commit (it opened the table after the merge);
otherwise it is kept, listed and on storage, with ``writer-live``, and drained once the writer
is quiet for ``writer_idle`` (or reopened). A merged generation whose folder is already gone
(collected by an older GC, or half collected) is drained at once: every reader fails on it
now, and the drain is the repair.

Folders not listed by the latest manifest at or below the shard's merge progress (drained by
us or by another compactor, or a failed flush attempt of a generation drained since) go when
the newest manifest version older than the grace period does not list them either
(:func:`unlisted_safely`): a reader that listed one read it before that version was written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memwal.errors import MemWalError, StateMovedError
from memwal.gc.model import Json
from memwal.store import Store
from memwal.table.drain import ListedEntry, compacted_manifest, compacted_since, write_next_version
from memwal.table.shards import ShardState, latest_shard_manifest
from memwal.table.writer import ManifestHistory


@dataclass(frozen=True)
class ShardDrain:
    """Generations one run takes out of one shard manifest, planned from ``from_version``."""

    shard_id: str
    from_version: int
    generations: tuple[int, ...]
    #: Of those, merged generations whose folder was already gone (readers fail on them now).
    repairs: tuple[int, ...] = ()
    #: Exactly the entries that leave, ``(generation, path)``: what the run matches in a newer
    #: manifest version (a number alone may name another entry by then: a rollup).
    entries: tuple[tuple[int, str], ...] = ()

    def to_dict(self) -> Json:
        return {"shard_id": self.shard_id, "from_version": self.from_version,
                "generations": list(self.generations), "repairs": list(self.repairs)}


@dataclass(frozen=True)
class DoneDrain:
    """A drain the run wrote: the manifest version it created."""

    shard_id: str
    manifest_version: int
    generations: tuple[int, ...]
    repairs: tuple[int, ...] = ()

    def to_dict(self) -> Json:
        return {"shard_id": self.shard_id, "manifest_version": self.manifest_version,
                "generations": list(self.generations), "repairs": list(self.repairs)}


class SafeVersions:
    """Per shard, the newest manifest version older than the grace period, read when needed."""

    def __init__(self, histories: Mapping[str, ManifestHistory], now: float, grace_seconds: float) -> None:
        self.histories, self.cutoff = histories, now - grace_seconds
        self._paths: dict[str, frozenset[str] | None] = {}

    def paths(self, shard_id: str) -> frozenset[str] | None:
        """Paths that version lists (None: no version is that old, or it cannot be read)."""
        if shard_id not in self._paths:
            history = self.histories[shard_id]
            v = history.newest_before(self.cutoff)
            try:
                self._paths[shard_id] = None if v is None else frozenset(
                    s.path for s in history.at(v).manifest.sstables)
            except (MemWalError, OSError):
                self._paths[shard_id] = None
        return self._paths[shard_id]


def unlisted_safely(safe: SafeVersions, shard_id: str, path: str) -> bool:
    """Whether no reader within the grace period can hold a manifest listing ``path``."""
    paths = safe.paths(shard_id)
    return paths is not None and path not in paths


#: A drain or rollup not written because the shard manifest kept moving (or lost the run) after the plan.
MOVED = "changed-since-plan:shard-manifest"

#: Times a shard's compactor version is tried against a manifest that moved: a live writer
#: flushes every few seconds, and a rollup takes longer than that to write.
WRITE_ATTEMPTS = 5


@dataclass(frozen=True)
class ShardCompaction:
    """What one run writes to one shard manifest: generations drained, runs replaced by rollups."""

    shard_id: str
    drained: tuple[tuple[int, str], ...] = ()
    runs: tuple[tuple[tuple[tuple[int, str], ...], ListedEntry], ...] = ()


def write_compaction(store: Store, state: ShardState, work: ShardCompaction) -> int:
    """Write ``work`` as the shard manifest's next version (compare-and-swap); the version
    written. When a writer flushed first, the latest version is read and the same work applied
    to it, while every entry it drains and every run it rolls up is still listed as planned
    (generation and path), at most :data:`WRITE_ATTEMPTS` times; a version another compactor
    wrote since (a drain, a rollup) stops it: the plan was made without it. Raises
    StateMovedError when it gives up (nothing of it is done)."""
    for attempt in range(WRITE_ATTEMPTS):
        try:
            return write_next_version(store, state, compacted_manifest(state, drained=work.drained, runs=work.runs))
        except StateMovedError:
            if attempt == WRITE_ATTEMPTS - 1:
                raise
            latest = latest_shard_manifest(store, state.shard_id)
            if latest is None or latest.version <= state.version:
                raise
            if compacted_since(state, latest):
                raise StateMovedError(f"shard {state.shard_id}: another compactor wrote the shard manifest since "
                                      f"version {state.version} (a drain or a rollup): this run's plan for it is "
                                      "stale; the next run plans again") from None
            state = latest
    raise AssertionError("unreachable")


__all__ = ["MOVED", "WRITE_ATTEMPTS", "DoneDrain", "SafeVersions", "ShardCompaction", "ShardDrain",
           "unlisted_safely", "write_compaction"]
