"""One GC run: the collectors' plans executed in order, exactly as planned (or less).

1. the GC marker, then the checkpoints read again (the handshake of
   :mod:`memwal.checkpoint.handshake`: one created meanwhile is seen here and kept);
2. the version expiry (:class:`memwal.gc.expiry.VersionExpiry`), less every live checkpoint's version;
3. the re-check of every drain and deletion against the table now (:func:`memwal.gc.recheck.recheck`),
   and the receipts of what the plan's proof read back and found in the base;
4. the rollups' folders (:mod:`memwal.rollup`), then the drains and rollups: each shard
   manifest's next version without the generations that leave it and with each rolled-up run
   replaced by its rollup (:mod:`memwal.gc.drain`; applied again to a newer version when a
   writer flushed meanwhile; a shard whose manifest kept moving keeps everything);
5. generations (Lance manifests first in every batch), then the WAL entries only deleted
   generations needed, then orphans when asked, then the shard-manifest versions no reader can
   hold (:mod:`memwal.gc.manifests`): through the engine, the lease checked before each batch, a
   path refused at deletion time reported, not deleted through;
6. the run history past its retention, the expired checkpoints, the marker's end;
7. what the run learnt, for the next plan: the retained-progress and WAL-header digests;
   then the audit record when asked.

A crash anywhere leaves what a rerun finishes: a generation leaves its shard manifest before
any of its files go, its Lance manifests go before its other files, its WAL entries after it,
and every digest is a cache written last. So every lease check is also a point where an
operator's cancel stops the run (:mod:`memwal.lease.cancel`): before the marker, the expiry,
each rollup, the drains and each batch of deletes.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING

from memwal.checkpoint.expiry import sweep_checkpoints
from memwal.checkpoint.handshake import gc_finished, gc_started
from memwal.core import clock as clocks
from memwal.core import steps
from memwal.errors import StateMovedError, UnsafePathError
from memwal.gc.delete import Target, check_under, delete_prefixes
from memwal.gc.drain import MOVED, DoneDrain, ShardCompaction, write_compaction
from memwal.gc.engine import GcEngine, LocalGcEngine
from memwal.gc.gates import ROLLUP_FAILED, UNSAFE_PATH
from memwal.gc.model import Blocked, DeletedGeneration, ExpiredVersions
from memwal.gc.plan import GcPlan, check_audit_destination
from memwal.gc.recheck import recheck
from memwal.gc.result import GcResult
from memwal.history.receipts import prune_receipts, write_receipt
from memwal.observe import progress
from memwal.rollup.write import RollupError, WrittenRollup, write_rollup
from memwal.table import Table
from memwal.table.compactions import record_compactions
from memwal.table.drain import ListedEntry, compacted_since
from memwal.table.naming import JOBS_DIR, parse_generation_dir, shard_dir
from memwal.table.paths import check_deletable, shard_of_key
from memwal.table.retained import RetainedVersion, remember_retained, retained_versions
from memwal.table.shards import generation_readable, probe_shard_manifest
from memwal.table.wal_digest import save_wal_digest

if TYPE_CHECKING:
    from memwal.lease import Lease

log = logging.getLogger(__name__)


def run_gc(table: Table, plan: GcPlan, *, engine: GcEngine | None = None, lease: Lease | None = None,
           orphans: bool = False, audit: bool = False) -> GcResult:
    """Execute ``plan`` (see the module docstring); the run's result."""
    engine = engine or LocalGcEngine()
    if audit:
        check_audit_destination(table.store)
    for key in [g.key for g in plan.generations] + [o.key for o in plan.orphans]:
        check_deletable(key)  # the whole plan is ours before anything is deleted
    run_id = lease.run_id if lease is not None and lease.run_id else uuid.uuid4().hex[:16]
    if lease:
        lease.check(safe_to_stop=True)
    steps.step("gc.before-marker")
    gc_started(table.store, run_id)
    expired: ExpiredVersions | None = None
    left: list[RetainedVersion] | None = None
    try:
        checkpoints = sweep_checkpoints(table, clocks.current()())
        if plan.version_expiry is not None:
            if lease:
                lease.check(safe_to_stop=True)
            expired, handle = plan.version_expiry.collect(table, keep=checkpoints.live)
        # the re-check reads afresh, once: the versions left and the latest from one listing (a listing
        # pass: the versions its plan knew, grown by those committed since)
        with table.reading(grown=plan.listed_only):
            if plan.version_expiry is not None:
                left = retained_versions(table, known=plan.progress_digest, dataset=handle)
            plan = recheck(table, plan, checkpoints.live, left)
        steps.step("gc.before-drain")
        if lease:
            lease.check(safe_to_stop=True)
        recorded = sum(write_receipt(table.store, r) is not None for r in plan.proofs)
        written: dict[str, int] = {}  # shard -> the manifest version this run wrote
        plan, drained, rolled, moved = _compact(table, plan, engine, lease, written)
        steps.step("gc.before-delete")
        result = _delete(table, plan, engine, lease, orphans)
        result = replace(result, drained=tuple(drained), rolled_up=tuple(rolled), blocked=result.blocked + moved)
        result = replace(result, history_pruned=plan.history.prune(table.store),
                         checkpoints_removed=checkpoints.remove(table, plan.checkpoint_sweep.expired_ids),
                         proofs_recorded=recorded, receipts_pruned=prune_receipts(table.store, plan.receipts_pruning))
    finally:
        gc_finished(table.store, run_id)
    record_compactions(table.store, written)
    if not plan.listed_only:  # a listing pass leaves both digests as the last whole run left them
        # (the table object keeps what its plan read: memwal.table.retained), and read no WAL header
        remember_retained(table, left if left is not None else list(plan.versions), before=plan.progress_digest)
        gone = {w.key for w in plan.wal_deletions}
        save_wal_digest(table.store, {k: h for k, h in plan.wal_headers.items() if k not in gone}, plan.wal_digest)
    result = plan.wait_of(replace(result, expired_versions=expired), clocks.current()())
    steps.step("gc.after-delete")
    progress.phase("gc", "after-delete")
    if audit:
        result = replace(result, audit_key=write_audit(table, result))
    log.info("gc %s: %d generations, %d WAL entries, %d bytes freed, %d blocked", table.uri, len(result.deleted),
             result.wal_entries_deleted, result.bytes_freed, len(result.blocked))
    return result


def _compact(table: Table, plan: GcPlan, engine: GcEngine, lease: Lease | None, compactions: dict[str, int]
             ) -> tuple[GcPlan, list[DoneDrain], list[WrittenRollup], tuple[Blocked, ...]]:
    """Under the lease, against the latest shard manifests: write every rollup's folder, then
    each shard's next manifest version (its drain and its rollups together, matched entry by
    entry, generation and path). A shard another compactor wrote since the plan (a concurrent
    GC's drain or rollup, lance-context's ``cleanup_wal()``) keeps everything this run planned for
    it, and so does one whose "gone" folder reads now (a rollup another GC was still copying when
    this plan listed). Where a shard's manifest kept moving, nothing of what its drain frees is
    deleted now, and a rollup folder written for it is left unlisted: an orphan (`gc --orphans`
    takes it once past ``--orphan-age-seconds`` and the gates of the generation it is named for).
    ``compactions`` receives each shard manifest version written (remembered for ``memwal status``)."""
    rolled: dict[str, list[WrittenRollup]] = {}
    failed: dict[str, tuple[str, str]] = dict(_moved_since_plan(table, plan))
    for r in plan.rollups:
        if r.shard_id in failed:
            continue
        if lease:
            lease.check(safe_to_stop=True)  # a rollup folder written before is unlisted: the next run deletes it
        steps.step("gc.before-rollup")
        try:
            rolled.setdefault(r.shard_id, []).append(
                write_rollup(table, r, remove_staging=partial(_remove_staging, table, lease)))
        except (RollupError, StateMovedError) as exc:
            failed[r.shard_id] = (ROLLUP_FAILED, str(exc))
    drains = {d.shard_id: d for d in plan.drains if d.generations}
    done: list[DoneDrain] = []
    written: list[WrittenRollup] = []
    steps.step("gc.before-manifest")
    for sid in sorted((set(drains) | set(rolled)) - set(failed)):
        d = drains.get(sid)
        mine = rolled.get(sid, [])
        work = ShardCompaction(sid, d.entries if d else (),
                               tuple((w.replaces, ListedEntry(w.generation, w.path, w.rows, w.decoded)) for w in mine))
        if lease:
            lease.check()
        try:
            version = write_compaction(table.store, plan.generation_plan.states[sid], work)
        except StateMovedError as exc:
            failed[sid] = (MOVED, str(exc))
            continue
        except UnsafePathError as exc:  # a link refused, never written through
            failed[sid] = (UNSAFE_PATH, str(exc))
            continue
        if d is not None:
            done.append(DoneDrain(sid, version, d.generations, d.repairs))
        written += mine
        compactions[sid] = version
    if not failed:
        return plan, done, written, ()
    stopped = {(d.shard_id, g) for d in plan.drains if d.shard_id in failed for g in d.generations}
    moved = tuple(Blocked(sid, g, failed[sid][0], failed[sid]) for sid, g in sorted(stopped))
    moved += tuple(Blocked(r.shard_id, r.generation, failed[r.shard_id][0], failed[r.shard_id])
                   for r in plan.rollups if r.shard_id in failed)
    gens = tuple(g for g in plan.generations if (g.shard_id, g.generation) not in stopped)
    wal = tuple(w for w in plan.wal_deletions if not any(s == w.shard_id and w.may_belong_to(g) for s, g in stopped))
    return (replace(plan, generation_plan=replace(plan.generation_plan, deletions=gens), wal_deletions=wal),
            done, written, moved)


def _moved_since_plan(table: Table, plan: GcPlan) -> Iterator[tuple[str, tuple[str, str]]]:
    """Shards whose planned drain or rollup no longer holds, read under the lease: a listed
    merged generation the plan found unreadable (drained at once: readers fail on it) reads now,
    or (for a shard with rollups to write, before writing them) another compactor wrote its
    manifest since the plan. The latest is probed from the planned version, not listed among the
    thousands of versions a writer that never reopens keeps; :func:`memwal.gc.drain.write_compaction`
    writes the planned version's next by compare-and-swap, and lists them when that fails."""
    for d in plan.drains:
        for g, path in d.entries:
            if g in d.repairs and generation_readable(table.store, f"{shard_dir(d.shard_id)}/{path}"):
                yield d.shard_id, (MOVED, f"shard {d.shard_id}: generation {g} ({path}) reads now (written since "
                                          "the plan listed the table, by a concurrent rollup): not drained")
                break
    for sid in sorted({r.shard_id for r in plan.rollups}):
        planned = plan.generation_plan.states[sid]
        latest = probe_shard_manifest(table.store, sid, planned.version)
        if latest is not None and latest.version > planned.version and compacted_since(planned, latest):
            yield sid, (MOVED, f"shard {sid}: another compactor wrote its manifest since the plan read version "
                               f"{planned.version}: its rollups and drain wait for the next run")


def _remove_staging(table: Table, lease: Lease | None, prefix: str) -> None:
    """Delete a rollup's staging folder through GC's own deletion (link-safe, ours only), here:
    one small folder. The lease is checked before each batch, but these checks are no safe
    points (an engine's are): the rollup is half-done until its staging is gone, so an
    operator's cancel stops the run at the next rollup's check, not here."""
    listed = tuple(table.store.list(prefix + "/"))
    delete_prefixes(table.store, [Target(prefix, listed)], before_batch=lease.check if lease else None)


def _delete(table: Table, plan: GcPlan, engine: GcEngine, lease: Lease | None, orphans: bool) -> GcResult:
    """Generations, then the WAL entries of those that went, then (asked) orphans."""
    unsafe: list[Blocked] = []
    deleted: list[DeletedGeneration] = []
    objects, freed = 0, 0
    held: set[tuple[str, int]] = set()
    outcomes = engine.delete_prefixes(table, [Target(g.key, g.listed) for g in plan.generations], lease,
                                      _report(generations=True))
    for g, (n, size, refused) in zip(plan.generations, outcomes, strict=True):
        objects, freed = objects + n, freed + size
        if refused:
            held.add((g.shard_id, g.generation))
            _unsafe(unsafe, g.shard_id, g.generation, refused)
        else:
            deleted.append(DeletedGeneration(g.shard_id, g.generation, g.path, n, size, g.gates))
    wal = [w for w in plan.wal_deletions if not any(s == w.shard_id and w.may_belong_to(g) for s, g in held)]
    for w in wal:
        check_under(w.key, f"{shard_dir(w.shard_id)}/wal")
    refused_keys = set(engine.delete_keys(table, [w.key for w in wal], lease, _report(generations=False)))
    done = [w for w in wal if w.key not in refused_keys]
    for w in wal:
        if w.key in refused_keys:
            _unsafe(unsafe, w.shard_id, w.generation or 0, [w.key])
    objects += len(done)
    freed += sum(w.size for w in done)
    orphans_deleted = 0
    if orphans and plan.orphans:
        ostats = engine.delete_prefixes(table, [Target(o.key, o.listed) for o in plan.orphans], lease)
        for o, (n, size, refused) in zip(plan.orphans, ostats, strict=True):
            objects, freed = objects + n, freed + size
            if refused:
                _unsafe(unsafe, o.shard_id, parse_generation_dir(o.path) or 0, refused)
            else:
                orphans_deleted += 1
    manifests = list(plan.manifest_pruning.keys)
    for key in manifests:
        check_under(key, f"{key.rsplit('/manifest/', 1)[0]}/manifest")
    refused_manifests = set(engine.delete_keys(table, manifests, lease)) if manifests else set()
    pruned = len(manifests) - len(refused_manifests)
    result = plan.result(dry_run=False, engine=engine.name)
    return replace(result, deleted=tuple(deleted), wal_entries_deleted=len(done), objects_deleted=objects,
                   bytes_freed=freed, orphans_deleted=orphans_deleted, blocked=result.blocked + tuple(unsafe),
                   manifest_versions_pruned=pruned)


def _unsafe(into: list[Blocked], shard_id: str | None, generation: int, keys: Sequence[str]) -> None:
    """An ``unsafe-path`` entry for keys refused at deletion time (once per entry)."""
    b = Blocked(shard_id, generation, UNSAFE_PATH,
                (UNSAFE_PATH, *(f"{k}: crosses a symbolic link or a non-directory, never followed" for k in keys)))
    if b not in into:
        into.append(b)


def _report(*, generations: bool) -> Callable[[list[str]], None]:
    """Tell a display (:mod:`memwal.observe.progress`) which shards a batch advanced, and by how much."""
    def done(keys: list[str]) -> None:
        per_shard: dict[str, int] = {}
        for key in keys:
            sid = shard_of_key(key)
            if sid is not None:
                per_shard[sid] = per_shard.get(sid, 0) + 1
        for sid, n in per_shard.items():
            if generations:
                progress.shard_done("gc", sid, generations=n)
            else:
                progress.shard_done("gc", sid, wal_entries=n)
    return done


def write_audit(table: Table, result: GcResult) -> str:
    """Persist the run's record (what went, which gates allowed it) in the table's store."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    key = f"{JOBS_DIR}/audit/gc-{stamp}-{uuid.uuid4().hex[:8]}.json"
    table.store.put_if_absent(key, json.dumps(result.to_dict(), indent=2, default=str).encode())
    return key
