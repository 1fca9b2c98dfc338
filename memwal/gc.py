"""Garbage collection of merged generations and WAL entries, behind every safety gate.

A generation g of shard s is deleted only when all of these hold (DESIGN.md section 3.4):

(a) ``not-merged``: g <= merge progress of s at the latest version;
(b) ``index-not-caught-up:<index>``: g <= every maintained index's recorded catch-up for
    s (no record means not caught up: readers use the generation's own index meanwhile);
(c) ``retained-version:<v>``: every retained version (main, branches, tags) had merged g,
    so time travel to it never needs the generation;
(d) ``grace-period``: the first retained version that merged g is older than the reader
    grace period: a reader that listed g before that merge may still be reading it, and
    pylance's LsmScanner fails rather than skips when a listed generation is missing;
(e) ``wal-needed-for-replay``: a WAL entry goes only when its generation is deletable and
    it is not past the shard manifest's ``replay_after_wal_entry_position``;
and ``unsafe-path``: the manifest path resolves inside ``_mem_wal/<shard>/`` (invariant 5).

Deletion order makes a crash harmless: per generation, its Lance manifests go first
(the dataset stops being openable as a whole), then its other files, then the WAL
entries that only deleted generations needed; a rerun finds the remains and finishes.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from memwal.naming import JOBS_DIR, MEM_WAL_INDEX_NAME, STAGING_DIR, shard_dir
from memwal.paths import UnsafePathError, generation_key
from memwal.retained import RetainedVersion, retained_versions
from memwal.shard_manifests import (
    ShardState,
    all_shard_manifests,
    list_generation_dirs,
    list_manifest_versions,
    list_wal_entries,
    read_shard_manifest,
    read_wal_entry_meta,
)
from memwal.status import maintained_indexes
from memwal.storage import Store
from memwal.table import Table

if TYPE_CHECKING:
    from memwal.lease import Lease

log = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 600.0
DEFAULT_ORPHAN_AGE_SECONDS = 3600.0


@dataclass
class Blocked:
    shard_id: str
    generation: int
    reason: str
    reasons: list[str] = field(default_factory=list)
    wal_position: int | None = None


@dataclass
class GenerationDeletion:
    shard_id: str
    generation: int
    path: str
    key: str
    gates: dict


@dataclass
class WalDeletion:
    shard_id: str
    position: int
    generation: int
    key: str
    size: int


@dataclass
class Orphan:
    kind: str  # "generation" or "staging"
    shard_id: str | None
    path: str
    key: str
    age_seconds: float


@dataclass
class GcPlan:
    table: str
    read_version: int
    planned_at: float
    grace_seconds: float
    generations: list[GenerationDeletion] = field(default_factory=list)
    wal_entries: list[WalDeletion] = field(default_factory=list)
    blocked: list[Blocked] = field(default_factory=list)
    orphans: list[Orphan] = field(default_factory=list)
    retained_versions: int = 0

    def to_json(self) -> dict:
        return {
            "table": self.table,
            "read_version": self.read_version,
            "grace_seconds": self.grace_seconds,
            "retained_versions": self.retained_versions,
            "would_delete": [
                {"shard_id": g.shard_id, "generation": g.generation, "path": g.path, "gates": g.gates}
                for g in self.generations
            ],
            "would_delete_wal_entries": [asdict(w) for w in self.wal_entries],
            "blocked": [_blocked_json(b) for b in self.blocked],
            "orphans": [asdict(o) for o in self.orphans],
        }


def _blocked_json(b: Blocked) -> dict:
    d = {"shard_id": b.shard_id, "generation": b.generation, "reason": b.reason}
    if len(b.reasons) > 1:
        d["reasons"] = b.reasons
    if b.wal_position is not None:
        d["wal_position"] = b.wal_position
    return d


@dataclass
class GcResult:
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

    def to_json(self) -> dict:
        return asdict(self)


def _merged_at(versions: list[RetainedVersion], shard_id: str, g: int) -> float | None:
    """Commit time of the first retained main-line version whose progress covers g."""
    for v in versions:
        if v.branch is None and v.manifest.compacted_generation(shard_id) >= g:
            return v.manifest.timestamp
    return None


def _gates(
    shard_id: str,
    g: int,
    *,
    compacted: int,
    catchup: dict[str, dict[str, int]],
    indexes: list[str],
    versions: list[RetainedVersion],
    now: float,
    grace_seconds: float,
) -> tuple[list[str], dict]:
    """Every gate that blocks generation g (empty when deletable), and the evidence."""
    reasons: list[str] = []
    if g > compacted:
        reasons.append("not-merged")
    caught = {}
    for name in indexes:
        caught[name] = catchup.get(name, {}).get(shard_id, 0)
        if g > caught[name]:
            reasons.append(f"index-not-caught-up:{name}")
    holders = [v for v in versions if v.manifest.compacted_generation(shard_id) < g]
    if holders:
        reasons.append(f"retained-version:{holders[0].describe()}")
    merged_at = _merged_at(versions, shard_id, g)
    if merged_at is None or now - merged_at < grace_seconds:
        if "not-merged" not in reasons:
            reasons.append("grace-period")
    evidence = {
        "merged_generation": compacted,
        "index_catchup": caught,
        "oldest_retained_progress": min((v.manifest.compacted_generation(shard_id) for v in versions), default=0),
        "merged_at": merged_at,
        "grace_seconds": grace_seconds,
    }
    return reasons, evidence


def plan_gc(
    table: Table,
    *,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    orphan_age_seconds: float = DEFAULT_ORPHAN_AGE_SECONDS,
    now: float | None = None,
) -> GcPlan:
    """Pure: what may go and, for everything that may not, which gate holds it."""
    now = time.time() if now is None else now
    latest = table.require_mem_wal()
    indexes = [i for i in maintained_indexes(latest) if i != MEM_WAL_INDEX_NAME]
    versions = retained_versions(table)
    plan = GcPlan(table=table.uri, read_version=latest.version, planned_at=now, grace_seconds=grace_seconds,
                  retained_versions=len(versions))
    for shard_id, state in all_shard_manifests(table.store).items():
        compacted = latest.compacted_generation(shard_id)
        dirs = list_generation_dirs(table.store, shard_id)
        present = {g: name for name, g in dirs.items()}
        deletable: set[int] = set()
        for fg in state.flushed:
            g = fg.generation
            try:
                key = generation_key(shard_id, fg.path)
            except UnsafePathError as exc:
                plan.blocked.append(Blocked(shard_id, g, "unsafe-path", ["unsafe-path", str(exc)]))
                continue
            reasons, evidence = _gates(shard_id, g, compacted=compacted, catchup=latest.index_catchup,
                                       indexes=indexes, versions=versions, now=now, grace_seconds=grace_seconds)
            if reasons:
                plan.blocked.append(Blocked(shard_id, g, reasons[0], reasons))
                continue
            deletable.add(g)
            if present.get(g) == key.rsplit("/", 1)[-1]:
                plan.generations.append(GenerationDeletion(shard_id, g, fg.path, key, evidence))
        _plan_wal(table.store, shard_id, state.replay_after_wal_entry_position, deletable, plan)
        _plan_generation_orphans(table.store, state, dirs, now, orphan_age_seconds, plan)
    _plan_staging_orphans(table.store, now, orphan_age_seconds, plan)
    return plan


def _plan_wal(store: Store, shard_id: str, replay_after: int, deletable: set[int], plan: GcPlan) -> None:
    if not deletable:
        return  # no WAL entry can go: skip reading every entry's schema
    for entry in list_wal_entries(store, shard_id):
        meta = read_wal_entry_meta(store, shard_id, entry.position)
        if meta.generation not in deletable:
            continue
        if entry.position > replay_after:
            plan.blocked.append(Blocked(shard_id, meta.generation, "wal-needed-for-replay",
                                        ["wal-needed-for-replay"], wal_position=entry.position))
            continue
        plan.wal_entries.append(WalDeletion(shard_id, entry.position, meta.generation, entry.key, entry.size))


def _newest_mtime(store: Store, prefix: str) -> float | None:
    times = [o.mtime for o in store.list(prefix)]
    return max(times) if times else None


def _plan_generation_orphans(store: Store, state: ShardState, dirs: dict[str, int], now: float, min_age: float,
                             plan: GcPlan) -> None:
    """Generation directories no manifest version ever listed (e.g. a failed flush's retry)."""
    shard_id = state.shard_id
    unlisted = set(dirs) - {s.path for s in state.manifest.sstables}
    if unlisted:  # the usual case is none: only then are older manifest versions read
        for v in list_manifest_versions(store, shard_id):
            if v < state.version:
                unlisted -= {s.path for s in read_shard_manifest(store, shard_id, v).manifest.sstables}
    for name in sorted(unlisted):
        key = f"{shard_dir(shard_id)}/{name}"
        newest = _newest_mtime(store, f"{key}/")
        if newest is not None and now - newest >= min_age:
            plan.orphans.append(Orphan("generation", shard_id, name, key, now - newest))


def _plan_staging_orphans(store: Store, now: float, min_age: float, plan: GcPlan) -> None:
    """Staging left by a crashed Spark merge (a finished merge removes its own)."""
    for name in store.list_dirs(f"{STAGING_DIR}/"):
        key = f"{STAGING_DIR}/{name}"
        newest = _newest_mtime(store, f"{key}/")
        if newest is not None and now - newest >= min_age:
            plan.orphans.append(Orphan("staging", None, name, key, now - newest))


def _check_under(key: str, prefix: str) -> None:
    """Belt and braces for invariant 5: every key we delete lies under the planned prefix."""
    if not key.startswith(prefix.rstrip("/") + "/"):
        raise UnsafePathError(prefix.split("/")[1] if "/" in prefix else "?", key, f"not under {prefix}")


def delete_prefix(store: Store, prefix: str) -> tuple[int, int]:
    """Delete everything under a generation (or staging) directory: manifests first."""
    objs = list(store.list(f"{prefix}/"))
    for o in objs:
        _check_under(o.key, prefix)
    manifests = [o for o in objs if "/_versions/" in o.key]
    rest = [o for o in objs if "/_versions/" not in o.key]
    for batch in (manifests, rest):
        if batch:
            store.delete_many([o.key for o in batch])
    return len(objs), sum(o.size for o in objs)


class LocalGcEngine:
    name = "local"

    def delete_prefixes(self, table: Table, prefixes: list[str], lease: Lease | None) -> list[tuple[int, int]]:
        out = []
        for prefix in prefixes:
            if lease:
                lease.check()
            out.append(delete_prefix(table.store, prefix))
        return out

    def delete_keys(self, table: Table, keys: list[str], lease: Lease | None) -> None:
        if lease:
            lease.check()
        if keys:
            table.store.delete_many(keys)


def execute_gc(table: Table, plan: GcPlan, engine=None, *, lease: Lease | None = None,
               orphans: bool = False) -> GcResult:
    engine = engine or LocalGcEngine()
    result = GcResult(table=table.uri, dry_run=False, engine=engine.name,
                      blocked=[_blocked_json(b) for b in plan.blocked],
                      orphans=[asdict(o) for o in plan.orphans])
    stats = engine.delete_prefixes(table, [g.key for g in plan.generations], lease)
    for g, (n, size) in zip(plan.generations, stats, strict=True):
        result.deleted.append({"shard_id": g.shard_id, "generation": g.generation, "path": g.path,
                               "objects": n, "bytes": size, "gates": g.gates})
        result.objects_deleted += n
        result.bytes_freed += size
    wal_keys = [w.key for w in plan.wal_entries]
    for w in plan.wal_entries:
        _check_under(w.key, f"{shard_dir(w.shard_id)}/wal")
    engine.delete_keys(table, wal_keys, lease)
    result.bytes_freed += sum(w.size for w in plan.wal_entries)
    result.wal_entries_deleted = len(wal_keys)
    result.objects_deleted += len(wal_keys)
    if orphans and plan.orphans:
        ostats = engine.delete_prefixes(table, [o.key for o in plan.orphans], lease)
        result.orphans_deleted = len(plan.orphans)
        result.objects_deleted += sum(n for n, _ in ostats)
        result.bytes_freed += sum(size for _, size in ostats)
    return result


def expire_versions(table: Table, older_than_seconds: float) -> dict:
    """Lance's own cleanup of old versions (it keeps tagged versions and the latest)."""
    stats = table.dataset().cleanup_old_versions(
        older_than=timedelta(seconds=older_than_seconds), error_if_tagged_old_versions=False
    )
    return {"older_than_seconds": older_than_seconds, "bytes_removed": stats.bytes_removed,
            "old_versions": stats.old_versions}


def write_audit(table: Table, result: GcResult) -> str:
    """Persist the run's record (what went, which gates allowed it) in the table's store."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    key = f"{JOBS_DIR}/audit/gc-{stamp}-{uuid.uuid4().hex[:8]}.json"
    table.store.put_if_absent(key, json.dumps(result.to_json(), indent=2, default=str).encode())
    return key


def run_gc(
    table: Table,
    *,
    engine=None,
    lease: Lease | None = None,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    expire_versions_seconds: float | None = None,
    orphans: bool = False,
    orphan_age_seconds: float = DEFAULT_ORPHAN_AGE_SECONDS,
    dry_run: bool = False,
    audit: bool = False,
    now: float | None = None,
) -> GcResult:
    expired = None
    if expire_versions_seconds is not None and not dry_run:
        if lease:
            lease.check()
        expired = expire_versions(table, expire_versions_seconds)
    plan = plan_gc(table, grace_seconds=grace_seconds, orphan_age_seconds=orphan_age_seconds, now=now)
    if dry_run:
        result = GcResult(table=table.uri, dry_run=True, blocked=[_blocked_json(b) for b in plan.blocked],
                          orphans=[asdict(o) for o in plan.orphans])
        result.deleted = [{"shard_id": g.shard_id, "generation": g.generation, "path": g.path, "gates": g.gates}
                          for g in plan.generations]
        result.wal_entries_deleted = len(plan.wal_entries)
        return result
    result = execute_gc(table, plan, engine, lease=lease, orphans=orphans)
    result.expired_versions = expired
    if audit:
        result.audit_key = write_audit(table, result)
    log.info("gc %s: %d generations, %d WAL entries, %d bytes freed, %d blocked", table.uri, len(result.deleted),
             result.wal_entries_deleted, result.bytes_freed, len(result.blocked))
    return result

