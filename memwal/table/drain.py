"""Drains and rollups: a compactor's new shard-manifest version, the way upstream's compactors write it.

Every client our users run (pylance's ``ShardWriter.lsm_scanner()``, lance-context) reads
the base table plus *every* generation the shard manifest lists, merged or not, and fails on
a listed generation that is gone (hazard H6). A generation therefore leaves storage only
after it has left the manifest: a new manifest version, allocated by compare-and-swap at the
latest version + 1 (``put_if_absent``), with the same writer epoch (a drain never claims
the shard: lance-context #199) and everything else copied. Upstream's WAL replay resumes
from ``replay_after_wal_entry_position``, not from the listed generations, "since an external
compactor may legitimately drain that" (lance #6767). What the writers do with such a version
was measured, not assumed (docs/decisions/0025-drain-protocol.md): both rebase their next
flush onto it.

What may be inferred from a drain someone else did (lance-context's ``cleanup_wal()`` records
its progress only this way, nothing in the MemWAL index): generations below the lowest one
listed (all below ``current_generation`` when none is) were merged by whoever drained them.
Compactors drain oldest first and only what they merged, so that is their protocol; such a
generation is never merged again (its data may be older than what was merged after it).

A rollup (:mod:`memwal.rollup`) writes the same kind of version: a run of merged generations
replaced by one entry under the run's highest number. Both leave the writer's fields as they
are (:func:`is_compaction` tells such a version from a writer's).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from dataclasses import dataclass

from memwal.core import steps
from memwal.errors import MemWalError, PreconditionFailedError, StateMovedError
from memwal.pb import shard_manifest_pb2
from memwal.store import Store
from memwal.table.naming import manifest_key, version_hint_key
from memwal.table.shards import ShardState

log = logging.getLogger(__name__)

ShardManifest = shard_manifest_pb2.ShardManifest


@dataclass(frozen=True)
class ListedEntry:
    """A generation entry a compactor adds to a shard manifest (a rollup's)."""

    generation: int
    path: str
    rows: int | None = None
    #: Its rows' decoded size (the writer's ``in_memory_bytes``), for the next rollup's plan.
    decoded: int | None = None


def drained_through(state: ShardState) -> int:
    """The highest generation a compactor took out of the manifest below everything listed
    (0: none). See the module docstring for why these count as merged."""
    listed = [g.generation for g in state.flushed]
    low = min(listed) if listed else state.current_generation
    return max(0, low - 1)


def merged_through(compacted: int, state: ShardState | None) -> int:
    """A shard's merge progress: the MemWAL index's, or what a drain shows when that is higher."""
    return compacted if state is None else max(compacted, drained_through(state))


def _writer_fields_kept(before: ShardManifest, after: ShardManifest) -> bool:
    """Same epoch, generation counter, WAL positions and status: no writer wrote ``after``."""
    return (before.writer_epoch == after.writer_epoch
            and before.current_generation == after.current_generation
            and before.replay_after_wal_entry_position == after.replay_after_wal_entry_position
            and before.wal_entry_position_last_seen == after.wal_entry_position_last_seen
            and before.status == after.status)


def is_drain(before: ShardManifest, after: ShardManifest) -> bool:
    """Whether ``after`` only took generations out of ``before`` (a compactor's version, not a
    writer's): the writer's fields kept, fewer generations."""
    kept = {(s.generation, s.path) for s in after.sstables}
    had = {(s.generation, s.path) for s in before.sstables}
    return _writer_fields_kept(before, after) and kept < had


def is_compaction(before: ShardManifest, after: ShardManifest) -> bool:
    """Whether a compactor wrote ``after`` over ``before``: a drain, or a rollup (the writer's
    fields kept, every generation number ``after`` lists already listed by ``before``, something
    changed). A writer's flush adds a number and moves the counter; its claim moves the epoch."""
    now = {(s.generation, s.path) for s in after.sstables}
    had = {(s.generation, s.path) for s in before.sstables}
    return (_writer_fields_kept(before, after) and now != had
            and {g for g, _ in now} <= {g for g, _ in had})


def compacted_since(before: ShardState, after: ShardState) -> bool:
    """Whether a compactor (a drain, a rollup; ours or anyone's) wrote a version between
    ``before`` and ``after``: an entry ``before`` listed is gone. A writer's flush or claim only
    adds entries, so a plan made from ``before`` still holds for ``after`` when none is gone."""
    kept = {(s.generation, s.path) for s in after.manifest.sstables}
    return any((s.generation, s.path) not in kept for s in before.manifest.sstables)


def compacted_manifest(state: ShardState, *, drained: Collection[tuple[int, str]] = (),
                       runs: Collection[tuple[Collection[tuple[int, str]], ListedEntry]] = ()) -> ShardManifest:
    """The next version of ``state``'s manifest less the ``drained`` ``(generation, path)`` entries,
    and with each run of listed entries replaced by its one new entry (a rollup); everything else
    as is. An entry matches by generation *and* path: a rollup another compactor listed under a
    number this plan drains is another entry (issue 61: two GCs at once dropped a live writer's
    rollup). A drained entry or a run no longer listed raises StateMovedError: its plan is stale; so
    does a new entry whose number another kept entry has (one folder a number listed)."""
    listed = {(s.generation, s.path) for s in state.manifest.sstables}
    if not set(drained) <= listed:
        raise StateMovedError(f"shard {state.shard_id}: manifest version {state.version} no longer lists "
                              f"every entry the plan drains")
    gone: set[tuple[int, str]] = set(drained)
    for run, _entry in runs:
        if not set(run) <= listed:
            raise StateMovedError(f"shard {state.shard_id}: manifest version {state.version} no longer lists "
                                  f"every generation of the run {sorted(g for g, _ in run)}")
        gone |= set(run)
    out = ShardManifest()
    out.CopyFrom(state.manifest)
    out.version = state.version + 1
    del out.sstables[:]
    counted = any(s.physical_rows for s in state.manifest.sstables)  # Lance 9 writers leave the figures out
    entries = [s for s in state.manifest.sstables if (s.generation, s.path) not in gone]
    kept = {s.generation for s in entries}
    for _run, new in runs:
        if new.generation in kept:
            # pylance's reader keys what each entry hides by its generation number: two entries of
            # one number in a listing make one hide the other's rows (observed: 166 of 298 rows
            # read). A rollup or heal never lists its folder beside another entry of its number.
            raise StateMovedError(f"shard {state.shard_id}: manifest version {state.version} lists another "
                                  f"entry of generation {new.generation} than the run it replaces: not listed")
        kept.add(new.generation)
        s = shard_manifest_pb2.SsTable(generation=new.generation, path=new.path)
        if counted and new.rows:
            s.physical_rows = new.rows
        if counted and new.decoded:
            s.in_memory_bytes = new.decoded
        entries.append(s)
    for s in sorted(entries, key=lambda s: s.generation):
        out.sstables.add().CopyFrom(s)
    return out


#: The shard manifest version this process wrote last, per (table root, shard): a follower does not
#: take its own GC's write for a writer's move (:class:`memwal.follow.watch.ShardWatch`).
_WRITTEN_HERE: dict[tuple[str, str], int] = {}


def written_here(store: Store, shard_id: str) -> int | None:
    """The shard manifest version this process wrote last to ``shard_id`` of ``store`` (None: none)."""
    return _WRITTEN_HERE.get((store.root, shard_id))


def write_next_version(store: Store, state: ShardState, manifest: ShardManifest) -> int:
    """Write ``manifest`` as version ``state.version + 1``, created only if no one wrote it
    first (StateMovedError then: a writer flushed or claimed the shard, or another compactor
    wrote; the caller plans again); the version written. The version hint is written after,
    best effort, as writers do (a stale hint only makes readers look further)."""
    key = manifest_key(state.shard_id, manifest.version)
    try:
        store.put_if_absent(key, manifest.SerializeToString())
    except PreconditionFailedError as exc:
        raise StateMovedError(f"shard {state.shard_id}: manifest version {manifest.version} was written "
                              "by someone else first") from exc
    _WRITTEN_HERE[(store.root, state.shard_id)] = manifest.version
    steps.step("gc.before-hint")  # the version written, its hint not yet: readers probe past a stale hint
    try:
        store.put(version_hint_key(state.shard_id), json.dumps({"version": manifest.version}).encode())
    except (MemWalError, OSError) as exc:
        log.info("shard %s: version hint not updated (%s); readers list further", state.shard_id, exc)
    return manifest.version


__all__ = ["ListedEntry", "compacted_manifest", "compacted_since", "drained_through", "is_compaction", "is_drain",
           "merged_through", "write_next_version", "written_here"]
