"""Executing a GC plan: version expiry, the checkpoint handshake, the deletions, the record.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from memwal.checkpoint import Checkpoint, list_checkpoints, live_checkpoints, remove_checkpoints
from memwal.checkpoint.handshake import gc_finished, gc_started
from memwal.core import clock as clocks
from memwal.core import steps
from memwal.core.document import Document
from memwal.gc.delete import LocalGcEngine, check_under, delete_objects
from memwal.gc.gates import DEFAULT_GRACE_SECONDS, GRACE_PERIOD, UNSAFE_PATH, Blocked
from memwal.gc.model import GcPlan, blocked_json
from memwal.gc.plan import DEFAULT_ORPHAN_AGE_SECONDS, check_audit_destination, prepare_gc
from memwal.gc.versions import ShardProgress, VersionProgress
from memwal.history.log import with_details
from memwal.table import Table
from memwal.table.manifest import maintained_indexes
from memwal.table.naming import JOBS_DIR, MEM_WAL_INDEX_NAME, parse_generation_dir, shard_dir
from memwal.table.paths import check_deletable
from memwal.table.retained import RetainedVersion, remember_retained, retained_versions

if TYPE_CHECKING:
    from memwal.lease import Lease

log = logging.getLogger(__name__)


@dataclass
class GcResult(Document):
    table: str
    dry_run: bool
    deleted: list[dict] = field(default_factory=list)
    wal_entries_deleted: int = 0
    bytes_freed: int = 0
    objects_deleted: int = 0
    blocked: list[dict] = field(default_factory=list)
    orphans: list[dict] = field(default_factory=list)
    orphans_deleted: int = 0
    expired_versions: dict | None = None
    audit_key: str | None = None
    engine: str = "local"
    broken_shards: list[dict] = field(default_factory=list)
    #: WAL entries kept on purpose (replay, fence sentinels): not blocked generations.
    kept_wal_entries: list[dict] = field(default_factory=list)
    #: Which retained versions block, and what would free them (None when none blocks).
    retention: dict | None = None
    #: Whether a later run with nothing else changed would free something (grace period only).
    time_will_free: bool = False
    #: Live checkpoints the run honoured, and the expired ones it removed (or would remove).
    checkpoints: list[dict] = field(default_factory=list)
    checkpoints_removed: list[str] = field(default_factory=list)
    #: Run-history records older than the retention that the run deleted (or would delete).
    history_pruned: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_plan(cls, plan: GcPlan, *, dry_run: bool, engine: str = "local") -> GcResult:
        """A result carrying the plan's explanations (blocked, kept, retention), nothing deleted yet."""
        return cls(table=plan.table, dry_run=dry_run, engine=engine, blocked=[blocked_json(b) for b in plan.blocked],
                   orphans=[asdict(o) for o in plan.orphans], broken_shards=plan.broken_shards,
                   kept_wal_entries=[asdict(k) for k in plan.kept_wal_entries], retention=plan.retention,
                   time_will_free=plan.time_will_free, checkpoints=plan.checkpoints)


def _report_unsafe(result: GcResult, shard_id: str | None, generation: int, keys: list[str]) -> None:
    """Add an ``unsafe-path`` blocked entry for keys refused at execution (once per entry)."""
    entry = {"shard_id": shard_id, "generation": generation, "reason": UNSAFE_PATH,
             "reasons": [UNSAFE_PATH] + [f"{k}: crosses a symbolic link or a non-directory, never followed"
                                         for k in keys]}
    if entry not in result.blocked:
        result.blocked.append(entry)


def execute_gc(table: Table, plan: GcPlan, engine=None, *, lease: Lease | None = None,
               orphans: bool = False) -> GcResult:
    """Delete what the plan allows; a path refused as unsafe now is reported, not deleted through.

    A generation refused at execution keeps its WAL entries too (they go only with it).
    """
    engine = engine or LocalGcEngine()
    for key in [g.key for g in plan.generations] + [o.key for o in plan.orphans]:
        check_deletable(key)  # the whole plan is ours before anything is deleted
    result = GcResult.from_plan(plan, dry_run=False, engine=engine.name)
    held: set[tuple[str, int]] = set()
    stats = engine.delete_prefixes(table, [g.key for g in plan.generations], lease)
    for g, (n, size, unsafe) in zip(plan.generations, stats, strict=True):
        result.objects_deleted += n
        result.bytes_freed += size
        if unsafe:
            held.add((g.shard_id, g.generation))
            _report_unsafe(result, g.shard_id, g.generation, unsafe)
            continue
        result.deleted.append({"shard_id": g.shard_id, "generation": g.generation, "path": g.path,
                               "objects": n, "bytes": size, "gates": g.gates})
    wal = [w for w in plan.wal_entries if (w.shard_id, w.generation) not in held]
    for w in wal:
        check_under(w.key, f"{shard_dir(w.shard_id)}/wal")
    refused = set(engine.delete_keys(table, [w.key for w in wal], lease) or [])
    done = [w for w in wal if w.key not in refused]
    for w in wal:
        if w.key in refused:
            _report_unsafe(result, w.shard_id, w.generation, [w.key])
    result.bytes_freed += sum(w.size for w in done)
    result.wal_entries_deleted = len(done)
    result.objects_deleted += len(done)
    if orphans and plan.orphans:
        ostats = engine.delete_prefixes(table, [o.key for o in plan.orphans], lease)
        for o, (n, size, unsafe) in zip(plan.orphans, ostats, strict=True):
            result.objects_deleted += n
            result.bytes_freed += size
            if unsafe:
                _report_unsafe(result, o.shard_id, parse_generation_dir(o.path) or 0, unsafe)
            else:
                result.orphans_deleted += 1
    return result


def expire_versions(table: Table, plan: GcPlan, *, keep: list[Checkpoint] = ()) -> dict:
    """Lance's own cleanup of exactly the plan's versions (``plan.expiring``), less every
    version a live checkpoint's record names (read again after the GC marker: its tag may be
    missing, the record pins by itself). Lance also keeps tagged versions and the latest.

    The published file snapshot is kept (hazard H3): a copy under the live MemWAL entry's own
    path, which the cleanup keeps, before and after it (memwal.snapshot.locate).
    """
    from memwal.snapshot.locate import hold_snapshot_file, keep_snapshot_file

    pinned = {c.version for c in keep}
    doomed = [v for v in plan.expiring if v not in pinned]
    held = hold_snapshot_file(table)
    kept = [keep_snapshot_file(table, held)] if held else []
    removed, freed = 0, 0
    if doomed:
        # A fresh handle: Lance's cleanup keeps the version its handle was opened at as the latest.
        stats = table.dataset().cleanup_old_versions(versions=doomed, error_if_tagged_old_versions=False)
        removed, freed = stats.old_versions, stats.bytes_removed
    if held:
        kept.append(keep_snapshot_file(table, held))
    return {"expire_before": plan.expire_before, "bytes_removed": freed,
            "old_versions": removed, "snapshot_file_kept": [k for k in kept if k]}


def write_audit(table: Table, result: GcResult) -> str:
    """Persist the run's record (what went, which gates allowed it) in the table's store."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    key = f"{JOBS_DIR}/audit/gc-{stamp}-{uuid.uuid4().hex[:8]}.json"
    table.store.put_if_absent(key, json.dumps(result.to_dict(), indent=2, default=str).encode())
    return key


def recheck_gc_plan(table: Table, plan: GcPlan, checkpoints: list[Checkpoint] | None = None,
                    versions: list[RetainedVersion] | None = None) -> GcPlan:
    """Right before deleting, re-read the latest table version once and drop what it no longer
    allows; never add anything: the run deletes the plan, or less.

    Merge progress and catch-up only grow in normal operation, but a table restored to an
    older version, or a commit that drops catch-up records (Lance's own compaction does),
    lowers them after the plan was made: generations above the new values are needed again.
    ``checkpoints`` are the live checkpoints read after the GC marker was written: a
    checkpoint created since the plan keeps what it pins. ``versions`` are the versions left
    after the planned expiry: one the plan expected gone (tagged meanwhile) still holds what
    it had not merged, and the grace period runs from the first version left that merged it.
    """
    latest = table.require_mem_wal()
    indexes = [i for i in maintained_indexes(latest) if i != MEM_WAL_INDEX_NAME]
    pins = checkpoints or []
    now = clocks.current()()
    by_shard = VersionProgress(versions) if versions is not None else None
    shard_progress: dict[str, ShardProgress] = {}

    def lost(shard_id: str, g: int, *, catchup: bool = True) -> str | None:
        if g > latest.compacted_generation(shard_id):
            return "not-merged"
        for name in indexes if catchup else []:
            if g > latest.index_catchup.get(name, {}).get(shard_id, 0):
                return f"index-not-caught-up:{name}"
        for c in pins:
            if c.pins(shard_id, g):
                return f"checkpoint:{c.id}"
        if by_shard is not None:
            progress = shard_progress.get(shard_id)
            if progress is None:
                progress = shard_progress[shard_id] = by_shard.shard(shard_id)
            holders = progress.holders(g)
            if holders:
                return f"retained-version:{holders[0].describe()}"
            first = progress.first_merged(g)
            if first is None or now - first.timestamp < plan.grace_seconds:
                return GRACE_PERIOD
        return None

    out = replace(plan, generations=[], wal_entries=[], orphans=[], blocked=list(plan.blocked))

    def keep(shard_id: str, g: int, item, into: list, *, catchup: bool = True, wal: int | None = None) -> None:
        why = lost(shard_id, g, catchup=catchup)
        if why is None:
            into.append(item)
        else:
            reason = f"changed-since-plan:{why}"
            out.blocked.append(Blocked(shard_id, g, reason, [reason], wal_position=wal))

    for d in plan.generations:
        keep(d.shard_id, d.generation, d, out.generations)
    for w in plan.wal_entries:
        keep(w.shard_id, w.generation, w, out.wal_entries, wal=w.position)
    for o in plan.orphans:
        g = parse_generation_dir(o.path) if o.kind == "generation" else None
        if g is None or o.shard_id is None:
            out.orphans.append(o)
        else:
            keep(o.shard_id, g, o, out.orphans, catchup=False)
    return out


def dry_run_result(table: Table, plan: GcPlan) -> GcResult:
    """The result a run of ``plan`` would give, with nothing deleted: the dry run's document."""
    result = GcResult.from_plan(plan, dry_run=True)
    result.deleted = [{"shard_id": g.shard_id, "generation": g.generation, "path": g.path, "objects": g.objects,
                       "bytes": g.bytes, "gates": g.gates} for g in plan.generations]
    result.wal_entries_deleted = len(plan.wal_entries)
    result.objects_deleted = sum(g.objects for g in plan.generations) + len(plan.wal_entries)
    result.bytes_freed = sum(g.bytes for g in plan.generations) + sum(w.size for w in plan.wal_entries)
    if plan.expire_before is not None:
        result.expired_versions = {"expire_before": plan.expire_before, "planned": plan.expiring}
    result.checkpoints_removed = list(plan.expired_checkpoints)
    result.history_pruned = len(plan.history_keys)
    return result


def run_gc(
    table: Table,
    *,
    engine=None,
    lease: Lease | None = None,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    expire_versions_seconds: float | None = None,
    orphans: bool = False,
    orphan_age_seconds: float = DEFAULT_ORPHAN_AGE_SECONDS,
    history_retention_seconds: float | None = None,
    dry_run: bool = False,
    audit: bool = False,
    now: float | None = None,
    plan: GcPlan | None = None,
) -> GcResult:
    """Plan (or take ``plan``), then expire versions, delete and write the audit record.

    Every input is read and validated before the first write: a corrupt WAL entry or an
    unusable audit folder fails with nothing written. The run executes exactly the plan:
    its version expiry (the versions the plan named, by the plan's cut-off), then its
    deletions, each re-checked against the latest table version, the versions left and the
    live checkpoints right before (:func:`recheck_gc_plan`: a re-check only drops items, with
    the gate that changed), so the dry run lists what the run deletes.
    """
    options = dict(grace_seconds=grace_seconds, orphan_age_seconds=orphan_age_seconds,
                   history_retention_seconds=history_retention_seconds,
                   expire_versions_seconds=expire_versions_seconds, now=now)
    if plan is None:
        plan = prepare_gc(table, audit=audit and not dry_run, **options)
    elif audit and not dry_run:
        check_audit_destination(table.store)
    if dry_run:
        return dry_run_result(table, plan)
    run_id = lease.run_id if lease is not None and lease.run_id else uuid.uuid4().hex[:16]
    if lease:
        lease.check()
    steps.step("gc.before-marker")
    gc_started(table.store, run_id)
    try:
        # After the marker (memwal.checkpoint.handshake): a checkpoint created from here on sees
        # this run and checks its view afterwards; one created before is read here and kept.
        live = live_checkpoints(table)
        expired, left = None, None
        if plan.expire_before is not None:
            if lease:
                lease.check()
            expired = expire_versions(table, plan, keep=live)
            expired["planned"] = plan.expiring
            left = retained_versions(table)
        plan = recheck_gc_plan(table, plan, live, left)
        steps.step("gc.before-delete")
        result = execute_gc(table, plan, engine, lease=lease, orphans=orphans)
        if plan.history_keys:
            delete_objects(table.store, with_details(plan.history_keys))
            result.history_pruned = len(plan.history_keys)
        gone = {c.id for c in list_checkpoints(table) if not c.live(clocks.current()())}
        result.checkpoints_removed = remove_checkpoints(
            table, [c for c in list_checkpoints(table) if c.id in gone and c.id in plan.expired_checkpoints])
    finally:
        gc_finished(table.store, run_id)
    remember_retained(table, left if left is not None else plan.versions)
    result.expired_versions = expired
    result.broken_shards = plan.broken_shards
    steps.step("gc.after-delete")
    if audit:
        result.audit_key = write_audit(table, result)
    log.info("gc %s: %d generations, %d WAL entries, %d bytes freed, %d blocked", table.uri, len(result.deleted),
             result.wal_entries_deleted, result.bytes_freed, len(result.blocked))
    return result
