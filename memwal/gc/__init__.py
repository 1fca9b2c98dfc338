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
(e) a WAL entry goes only when its generation is deletable and it is not past the shard
    manifest's ``replay_after_wal_entry_position``; one past it is *kept*, not blocking:
    it is reported in ``kept_wal_entries`` (``wal-needed-for-replay``) while its generation
    goes, and so is a fence sentinel (``fence-sentinel``: deleting it would free a position
    a fenced-out writer could claim);
(f) ``checkpoint:<id>``: no live reader checkpoint lists g (memwal.checkpoint); its base
    version is tagged, so Lance's cleanup keeps it and gate (c) holds what merged after it.
    Expired checkpoints are removed by the run (tag, then record). Before it deletes, a run
    writes the GC marker and reads the checkpoints again (memwal.checkpoint.handshake), so a
    checkpoint created meanwhile is either seen and kept, or sees the run and checks its view;
and ``unsafe-path``: the manifest path resolves inside ``_mem_wal/<shard>/`` (invariant 5).
An unlisted generation directory (an orphan) passes the same gates (``orphan-<gate>``), so
one above the merged generation is never deleted; a shard whose latest manifest cannot be
established keeps everything (``shard-manifest-gap`` / ``-unreadable`` / ``-missing``).
A run reads and validates everything before its first write, and re-checks progress and
catch-up against the latest table version right before it deletes.

A retained version that blocks is explained in ``retention`` (which versions, what holds
them, how many generations each holds back, and the ``--expire-versions`` value that would
expire the untagged ones); ``time_will_free`` says whether a later run with nothing else
changed would free something (a generation held only by the grace period).

Deletion order makes a crash harmless: per batch of generations, their Lance manifests go
first (the datasets stop being openable as a whole), then their other files, then the WAL
entries that only deleted generations needed; a rerun finds the remains and finishes.
Deletions are batched (one listing per shard, one lease check and two store calls per
batch of objects) so collecting thousands of generations costs seconds, not minutes.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from memwal.checkpoint import TAG_PREFIX, Checkpoint, list_checkpoints, live_checkpoints, remove_checkpoints
from memwal.checkpoint.handshake import gc_finished, gc_started
from memwal.core import clock as clocks
from memwal.core import steps
from memwal.errors import BadInputError, LinkedPathError, MemWalError, NotFoundError, UnsafePathError
from memwal.history.log import expired_history
from memwal.inspect.status import maintained_indexes
from memwal.store import LocalStore, ObjectInfo, Store
from memwal.table import Table
from memwal.table.naming import JOBS_DIR, MEM_WAL_DIR, MEM_WAL_INDEX_NAME, STAGING_DIR, parse_generation_dir, shard_dir
from memwal.table.paths import check_deletable, generation_key, shard_of_key
from memwal.table.retained import RetainedVersion, retained_versions
from memwal.table.shards import (
    UNREADABLE,
    ShardManifestError,
    ShardState,
    WalEntry,
    WalEntryMeta,
    list_generation_dirs,
    list_manifest_versions,
    list_wal_entries,
    read_shard_manifest,
    read_shard_manifests,
    read_wal_entry_meta,
)

if TYPE_CHECKING:
    from memwal.lease import Lease

log = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 600.0
DEFAULT_ORPHAN_AGE_SECONDS = 3600.0
#: Reason of whatever a symbolic link in the table (or a manifest path leaving its shard) holds.
UNSAFE_PATH = "unsafe-path"
#: Plans retried when a listed object vanished before it was read (a concurrent GC).
PLAN_ATTEMPTS = 5
#: Why a WAL entry is kept although its generation goes (see the module docstring, gate e).
WAL_NEEDED_FOR_REPLAY = "wal-needed-for-replay"
FENCE_SENTINEL = "fence-sentinel"
GRACE_PERIOD = "grace-period"
#: Objects deleted per batch: the lease is checked before each batch, and a batch is two
#: store calls (its manifests, then its other files), so a lost lease stops the run within
#: one batch while thousands of generations cost a few dozen checks, not one each.
BATCH_OBJECTS = 4000
#: Up to this many directories of one parent are listed one by one; more, and the parent
#: (a shard directory) is listed once: one walk instead of one per generation.
PER_DIRECTORY_LISTING_MAX = 16
#: Concurrent WAL entry reads (schema only) while planning on an object store.
WAL_READ_THREADS = 16
#: Delete requests a batch is spread over at once, each of at least DELETE_SLICE_MIN keys
#: (S3 takes 1,000 keys a request). On an object store this overlaps request latency; on a
#: local disk the file system's unlink and rmdir wait on its journal, which concurrent
#: calls share (measured on ext4: unlinking 82,500 files and removing 52,000 directories
#: took 19 s in one thread, 11.5 s in four; GC of them 19.1 s with one delete thread, 11.9 s
#: with sixteen). On tmpfs, where nothing waits, threads only add contention (3.3 s -> 4.5 s).
DELETE_THREADS = 8
DELETE_SLICE_MIN = 250


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
class KeptWal:
    """A WAL entry GC keeps although nothing blocks its generation (or it has none)."""

    shard_id: str
    position: int
    generation: int | None  # None for a fence sentinel
    reason: str  # WAL_NEEDED_FOR_REPLAY or FENCE_SENTINEL


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
    broken_shards: list[dict] = field(default_factory=list)
    kept_wal_entries: list[KeptWal] = field(default_factory=list)
    retention: dict | None = None
    time_will_free: bool = False
    #: Live checkpoints (id, version, expires_at) and the expired ones this run removes.
    checkpoints: list[dict] = field(default_factory=list)
    expired_checkpoints: list[str] = field(default_factory=list)
    #: Run-history records older than the retention: this run deletes exactly these.
    history_keys: list[str] = field(default_factory=list)

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
            "broken_shards": self.broken_shards,
            "kept_wal_entries": [asdict(k) for k in self.kept_wal_entries],
            "retention": self.retention,
            "time_will_free": self.time_will_free,
            "checkpoints": self.checkpoints,
            "expired_checkpoints": self.expired_checkpoints,
            "history_records_to_prune": len(self.history_keys),
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

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_plan(cls, plan: GcPlan, *, dry_run: bool, engine: str = "local") -> GcResult:
        """A result carrying the plan's explanations (blocked, kept, retention), nothing deleted yet."""
        return cls(table=plan.table, dry_run=dry_run, engine=engine, blocked=[_blocked_json(b) for b in plan.blocked],
                   orphans=[asdict(o) for o in plan.orphans], broken_shards=plan.broken_shards,
                   kept_wal_entries=[asdict(k) for k in plan.kept_wal_entries], retention=plan.retention,
                   time_will_free=plan.time_will_free, checkpoints=plan.checkpoints)


class Verdict(NamedTuple):
    """What the gates say about one generation."""

    reasons: list[str]  # every gate that blocks it (empty when deletable)
    evidence: dict  # the values the gates compared
    holders: list[RetainedVersion]  # retained versions that still need it (gate c)


def _gates(
    shard_id: str,
    g: int,
    *,
    compacted: int,
    catchup: dict[str, dict[str, int]],
    indexes: list[str],
    progress: list[tuple[RetainedVersion, int]],
    now: float,
    grace_seconds: float,
    checkpoints: tuple[Checkpoint, ...] = (),
) -> Verdict:
    """Every gate that blocks generation g, and the evidence.

    ``progress`` pairs each retained version with its merge progress for the shard, read
    once per shard rather than once per generation.
    """
    reasons: list[str] = []
    if g > compacted:
        reasons.append("not-merged")
    caught = {}
    for name in indexes:
        caught[name] = catchup.get(name, {}).get(shard_id, 0)
        if g > caught[name]:
            reasons.append(f"index-not-caught-up:{name}")
    reasons += [f"checkpoint:{c.id}" for c in checkpoints if c.pins(shard_id, g)]
    holders = [v for v, p in progress if p < g]
    if holders:
        reasons.append(f"retained-version:{holders[0].describe()}")
    # the first retained main-line version that merged g: when readers stopped needing it
    merged_at = next((v.manifest.timestamp for v, p in progress if v.branch is None and p >= g), None)
    if (merged_at is None or now - merged_at < grace_seconds) and "not-merged" not in reasons:
        reasons.append(GRACE_PERIOD)
    evidence = {
        "merged_generation": compacted,
        "index_catchup": caught,
        "oldest_retained_progress": min((p for _, p in progress), default=0),
        "merged_at": merged_at,
        "grace_seconds": grace_seconds,
    }
    return Verdict(reasons, evidence, holders)


def plan_gc(
    table: Table,
    *,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    orphan_age_seconds: float = DEFAULT_ORPHAN_AGE_SECONDS,
    history_retention_seconds: float | None = None,
    now: float | None = None,
) -> GcPlan:
    """Pure: what may go and, for everything that may not, which gate holds it."""
    now = clocks.current()() if now is None else now
    latest = table.require_mem_wal()
    indexes = [i for i in maintained_indexes(latest) if i != MEM_WAL_INDEX_NAME]
    versions = retained_versions(table)
    plan = GcPlan(table=table.uri, read_version=latest.version, planned_at=now, grace_seconds=grace_seconds,
                  retained_versions=len(versions))
    ckpts = list_checkpoints(table)
    live = tuple(c for c in ckpts if c.live(now))
    plan.checkpoints = [{"id": c.id, "name": c.name, "version": c.version, "expires_at": c.expires_at}
                        for c in live]
    plan.expired_checkpoints = [c.id for c in ckpts if not c.live(now)]
    held: list[HeldGeneration] = []  # per merged generation a retained version blocks
    found = read_shard_manifests(table.store)
    for err in found.broken.values():
        _plan_broken_shard(table.store, err, plan)
    for shard_id, state in found.states.items():
        compacted = latest.compacted_generation(shard_id)
        dirs = list_generation_dirs(table.store, shard_id)
        present = {g: name for name, g in dirs.items()}
        deletable: set[int] = set()
        progress = [(v, v.manifest.compacted_generation(shard_id)) for v in versions]
        gates = partial(_gates, shard_id, compacted=compacted, catchup=latest.index_catchup, indexes=indexes,
                        progress=progress, now=now, grace_seconds=grace_seconds, checkpoints=live)
        for fg in state.flushed:
            g = fg.generation
            try:
                key = generation_key(shard_id, fg.path)
            except UnsafePathError as exc:
                plan.blocked.append(Blocked(shard_id, g, "unsafe-path", ["unsafe-path", str(exc)]))
                continue
            verdict = gates(g)
            if verdict.reasons:
                plan.blocked.append(Blocked(shard_id, g, verdict.reasons[0], verdict.reasons))
                if verdict.holders and g <= compacted:
                    held.append(HeldGeneration(g, verdict.holders, progress, verdict.reasons))
                continue
            deletable.add(g)
            if present.get(g) == key.rsplit("/", 1)[-1]:
                plan.generations.append(GenerationDeletion(shard_id, g, fg.path, key, verdict.evidence))
        _plan_wal(table.store, shard_id, state.replay_after_wal_entry_position, deletable, plan)
        _plan_generation_orphans(table.store, state, dirs, gates, now, orphan_age_seconds, plan)
    _plan_staging_orphans(table.store, now, orphan_age_seconds, plan)
    _plan_unsafe_links(table.store, plan)  # path safety (A)
    plan.retention = retention_report(held, now, grace_seconds)
    plan.time_will_free = any(b.reasons == [GRACE_PERIOD] for b in plan.blocked)
    if history_retention_seconds is not None:
        plan.history_keys = expired_history(table.store, now - history_retention_seconds)
    return plan


class HeldGeneration(NamedTuple):
    """A merged generation the retained-version gate blocks, with what decides its fate."""

    generation: int
    holders: list[RetainedVersion]  # retained versions that had not merged it
    progress: list[tuple[RetainedVersion, int]]  # every retained version's progress for its shard
    reasons: list[str]  # every gate that blocks it now


def _freed_by_expiry(h: HeldGeneration, seconds: float, now: float, grace_seconds: float) -> tuple[bool, list[str]]:
    """Whether expiring the untagged versions older than ``seconds`` would let the generation
    go, and if not which gates would still hold it: every gate, not just the first. Expiry
    can also remove the version that first merged it, which moves its grace period later."""
    def expired(v: RetainedVersion) -> bool:
        return _held_by(v) is None and now - v.manifest.timestamp >= seconds

    others = [r for r in h.reasons if not r.startswith("retained-version") and r != GRACE_PERIOD]
    if any(not expired(v) for v in h.holders):
        others.append("retained-version")
    merged_at = next((v.manifest.timestamp for v, p in h.progress
                      if v.branch is None and p >= h.generation and not expired(v)), None)
    if merged_at is None or now - merged_at < grace_seconds:
        others.append(GRACE_PERIOD)
    return not others, others


def retention_report(held: list[HeldGeneration], now: float, grace_seconds: float = 0.0) -> dict | None:
    """Which retained versions hold merged generations back, and what would free each.

    ``held`` lists the merged generations the retained-version gate blocks. Untagged
    main-line versions go with Lance's cleanup (``--expire-versions SECONDS``): the hint gives
    the largest value that still expires every blocking one (it keeps the most history; ages
    only grow, so it stays valid), and how many generations that frees once every gate is
    counted (indexes, checkpoints, and the grace period, which expiry can move later), naming
    the gates that would still hold the rest. A tag, a branch, or a version a branch starts
    from is the user's to delete: no GC option removes it.
    """
    if not held:
        return None
    counts: Counter[int] = Counter(id(v) for h in held for v in h.holders)
    versions = {id(v): v for h in held for v in h.holders}
    rows = sorted((_blocking_version(v, counts[i], now) for i, v in versions.items()),
                  key=lambda r: (r["branch"] or "", r["version"]))
    expirable = [r for r in rows if r["held_by"] is None]
    hints = []
    if expirable:
        seconds = max(0, math.floor(min(r["age_seconds"] for r in expirable)))
        outcomes = [_freed_by_expiry(h, seconds, now, grace_seconds) for h in held]
        freed = sum(ok for ok, _ in outcomes)
        still = Counter(r for ok, rs in outcomes if not ok for r in rs)
        rest = ("" if not still else "; the others would still be held by "
                + ", ".join(f"{r} ({n})" for r, n in sorted(still.items())))
        hints.append(f"untagged version(s) {_versions_text(expirable)}: run gc with --expire-versions {seconds} "
                     f"to expire them, which frees {freed} of the {len(held)} generation(s) retained versions hold"
                     + rest)
    for r in rows:
        if r["held_by"] == "checkpoint":
            ids = ", ".join(t.removeprefix(TAG_PREFIX) for t in r["tag"].split(", "))
            hints.append(f"version {r['version']} is pinned by checkpoint {ids}: it is freed when the checkpoint "
                         "expires or is deleted (memwal checkpoint delete)")
        elif r["tag"]:
            hints.append(f"version {r['version']} is tagged {r['tag']}: delete the tag to free it "
                         "(GC never deletes tags)")
        elif r["held_by"] == "branch":
            where = r["branch"] or r["starts_branch"]
            hints.append(f"version {r['version']} is kept by branch {where}: delete the branch to free it "
                         "(GC never deletes branches)")
    return {"blocking_versions": rows, "hint": "; ".join(hints)}


def _blocking_version(v: RetainedVersion, generations_held: int, now: float) -> dict:
    """One ``retention.blocking_versions`` entry: the version, what keeps it, how much it holds."""
    tag = ", ".join(sorted(v.tags)) or None
    starts = ", ".join(sorted(v.child_branches)) or None
    return {"version": v.version, "branch": v.branch, "tag": tag, "starts_branch": starts, "held_by": _held_by(v),
            "age_seconds": round(max(0.0, now - v.manifest.timestamp), 1), "generations_held": generations_held}


def _held_by(v: RetainedVersion) -> str | None:
    """What keeps a version from Lance's cleanup: ``"checkpoint"`` (only checkpoint tags), ``"tag"``,
    ``"branch"``, or None (only its age)."""
    if v.tags and all(t.startswith(TAG_PREFIX) for t in v.tags):
        return "checkpoint"
    if v.tags:
        return "tag"
    return "branch" if v.branch is not None or v.child_branches else None


def _versions_text(rows: list[dict]) -> str:
    """``3, 4, 5`` (or ``3..40`` for a long run) for a hint."""
    vs = sorted(r["version"] for r in rows)
    return f"{vs[0]}..{vs[-1]}" if len(vs) > 5 else ", ".join(map(str, vs))


def _plan_broken_shard(store: Store, err: ShardManifestError, plan: GcPlan) -> None:
    """A shard whose latest manifest is unknown keeps everything: its generations, WAL and orphans.

    Without the latest manifest nothing tells which generations are listed or replayable,
    so each generation directory on storage is reported as blocked by the shard's problem.
    """
    plan.broken_shards.append({"shard_id": err.shard_id, "reason": err.reason, "detail": str(err)})
    for g in sorted(set(list_generation_dirs(store, err.shard_id).values())):
        plan.blocked.append(Blocked(err.shard_id, g, err.reason, [err.reason, str(err)]))


def _plan_wal(store: Store, shard_id: str, replay_after: int, deletable: set[int], plan: GcPlan) -> None:
    """WAL entries that go with deletable generations; those kept on purpose are reported as kept.

    An entry past ``replay_after`` is still needed to rebuild the writer's MemTable after a
    crash, whatever happened to its generation (which may well go: a generation's files and
    its WAL entry are separate copies). A fence sentinel belongs to no generation and keeps
    a writer epoch's claim on its position. Neither is a blocked generation.
    """
    if not deletable:
        return  # no WAL entry can go: skip reading every entry's schema
    entries = list_wal_entries(store, shard_id)
    for entry, meta in zip(entries, _wal_metas(store, shard_id, entries), strict=True):
        if meta.is_fence_sentinel:
            plan.kept_wal_entries.append(KeptWal(shard_id, entry.position, None, FENCE_SENTINEL))
        elif meta.generation not in deletable:
            continue  # kept with its generation, which is reported blocked
        elif entry.position > replay_after:
            plan.kept_wal_entries.append(KeptWal(shard_id, entry.position, meta.generation, WAL_NEEDED_FOR_REPLAY))
        else:
            plan.wal_entries.append(WalDeletion(shard_id, entry.position, meta.generation, entry.key, entry.size))


def _wal_metas(store: Store, shard_id: str, entries: list[WalEntry]) -> list[WalEntryMeta]:
    """Every entry's schema metadata: concurrently on an object store, where each read is a
    request whose latency dominates; in order on a local disk, where a read is a few syscalls."""
    read = partial(_read_wal_meta, store, shard_id)
    if isinstance(store, LocalStore) or len(entries) < 2:
        return [read(e) for e in entries]
    with ThreadPoolExecutor(max_workers=min(WAL_READ_THREADS, len(entries))) as pool:
        return list(pool.map(read, entries))


def _read_wal_meta(store: Store, shard_id: str, entry: WalEntry) -> WalEntryMeta:
    return read_wal_entry_meta(store, shard_id, entry.position)


def _newest_mtime(store: Store, prefix: str) -> float | None:
    times = [o.mtime for o in store.list(prefix)]
    return max(times) if times else None


def _plan_generation_orphans(store: Store, state: ShardState, dirs: dict[str, int],
                             gates: Callable[[int], tuple[list[str], dict]], now: float, min_age: float,
                             plan: GcPlan) -> None:
    """Generation directories no manifest version ever listed (e.g. a failed flush's retry).

    A directory whose generation is above the shard's merged generation is never one: it
    may hold the only copy of rows a manifest we cannot see (or a writer mid-flush) lists,
    so it is kept and reported (``orphan-not-merged``), whatever the manifests say. The
    other gates apply too (``orphan-<gate>``): "unlisted" is only as true as the manifests
    we read, and a reader may hold a listing that named the directory.
    """
    shard_id = state.shard_id
    unlisted = set(dirs) - {s.path for s in state.manifest.sstables}
    if unlisted:  # the usual case is none: only then are older manifest versions read
        try:
            for v in list_manifest_versions(store, shard_id):
                if v < state.version:
                    unlisted -= {s.path for s in read_shard_manifest(store, shard_id, v).manifest.sstables}
        except MemWalError as exc:  # an older version we cannot read may list any of them
            for name in sorted(unlisted):
                plan.blocked.append(Blocked(shard_id, dirs[name], UNREADABLE, [UNREADABLE, f"{name}: {exc}"]))
            return
    for name in sorted(unlisted):
        reasons = [f"orphan-{r}" for r in gates(dirs[name])[0]]
        if reasons:
            plan.blocked.append(Blocked(shard_id, dirs[name], reasons[0], [*reasons, name]))
            continue
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


def _plan_unsafe_links(store: Store, plan: GcPlan) -> None:
    """Report every symbolic link under ``_mem_wal/`` as ``unsafe-path`` and keep what it could redirect.

    Links are never followed (the store skips them in listings), but a deletion planned
    next to one is held too: a link at or inside a generation directory holds that
    generation and its WAL entries; anywhere else in a shard (the shard directory itself,
    ``wal/``, ``manifest/``) every deletion in the shard; under ``_staging/`` that staging
    directory; ``_mem_wal`` itself everything.
    """
    for link in store.list_links(f"{MEM_WAL_DIR}/"):
        scope, shard_id, generation = _link_scope(link)
        plan.blocked.append(Blocked(shard_id, generation, UNSAFE_PATH, [UNSAFE_PATH, _link_detail(link)]))
        held = {(g.shard_id, g.generation) for g in plan.generations if _under(g.key, scope)}
        if generation:  # the linked directory is not listed as one, but its WAL entries may be planned
            held.add((shard_id, generation))
        plan.generations = [g for g in plan.generations if (g.shard_id, g.generation) not in held]
        plan.wal_entries = [w for w in plan.wal_entries
                            if not _under(w.key, scope) and (w.shard_id, w.generation) not in held]
        plan.orphans = [o for o in plan.orphans if not _under(o.key, scope) and not _under(scope, o.key)]


def _link_scope(link: str) -> tuple[str, str | None, int]:
    """(key prefix whose deletions a link holds, its shard or None, its generation or 0)."""
    parts = link.split("/")
    shard_id = shard_of_key(link + "/x")  # the link may be the shard directory itself
    if shard_id is None:
        depth = 3 if len(parts) > 2 and f"{parts[0]}/{parts[1]}" == STAGING_DIR else 2
        return "/".join(parts[:depth]), None, 0
    generation = parse_generation_dir(parts[2]) if len(parts) > 2 else None
    if generation is None:
        return shard_dir(shard_id), shard_id, 0
    return "/".join(parts[:3]), shard_id, generation


def _under(key: str, prefix: str) -> bool:
    """Whether ``key`` is ``prefix`` or lies below it."""
    return key == prefix or key.startswith(prefix + "/")


def _link_detail(key: str) -> str:
    """The explanation carried in a blocked entry's ``reasons`` for a link found in the table."""
    return f"{key}: symbolic link, never followed"


def _check_under(key: str, prefix: str) -> None:
    """Belt and braces for invariant 5: every key we delete lies under the planned prefix."""
    if not key.startswith(prefix.rstrip("/") + "/"):
        raise UnsafePathError(shard_of_key(prefix + "/x"), key, f"not under {prefix}")


class PrefixOutcome(NamedTuple):
    """What deleting one directory did (picklable: Spark executors return it)."""

    objects: int  # objects deleted
    bytes: int  # bytes freed
    unsafe: list[str]  # keys refused: links found, or paths that crossed one at deletion time


def delete_objects(store: Store, keys: list[str]) -> list[str]:
    """The one way GC deletes objects, for every engine and store; returns the keys refused.

    Every key must be one of ours (:func:`check_deletable`; otherwise UnsafePathError and
    nothing of the batch is deleted). The store then checks each key when it deletes it:
    a local store refuses a key whose path crosses a symbolic link (an object store has
    none) and still deletes the others.
    """
    for key in keys:
        check_deletable(key)
    if not keys:
        return []
    try:
        store.delete_many(keys)
    except LinkedPathError as exc:
        log.warning("gc refused %d path(s) crossing a symbolic link or a non-directory, first: %s",
                    len(exc.refused), exc)
        return list(exc.refused)
    return []


def delete_prefix(store: Store, prefix: str) -> PrefixOutcome:
    """Delete everything under one generation (or staging) directory (see :func:`delete_prefixes`)."""
    return delete_prefixes(store, [prefix])[0]


def delete_prefixes(store: Store, prefixes: list[str], *,
                    before_batch: Callable[[], None] | None = None) -> list[PrefixOutcome]:
    """Delete everything under generation (or staging) directories, batch by batch, manifests first.

    Checked now, at execution, not only when planned: a link at or anywhere under a
    directory, or on the way to it, refuses that whole directory (nothing in it is deleted,
    the links are reported), and a link swapped in after this check is refused per key by
    the store. In each batch every directory's Lance manifests (``_versions/``) go before
    any of their other files, and a directory whose manifest was refused keeps its other
    files too, so no directory is left half-deleted because of a link. ``before_batch``
    (the lease check) runs before each batch of about :data:`BATCH_OBJECTS` objects, so a
    lost lease stops the run before its next batch. Outcomes are in ``prefixes`` order.
    """
    for prefix in prefixes:
        check_deletable(prefix)
    objs, links = _survey(store, prefixes)
    outcomes: dict[str, PrefixOutcome] = {}
    ready: list[str] = []
    for prefix in objs:
        bad = sorted({link for link in links if _under(link, prefix) or _under(prefix, link)})
        if bad:
            outcomes[prefix] = PrefixOutcome(0, 0, bad)
        else:
            ready.append(prefix)
    with ThreadPoolExecutor(DELETE_THREADS) as pool:
        deleter = partial(_delete_concurrently, store, pool)
        for batch in _batches(ready, objs):
            if before_batch:
                before_batch()
            outcomes.update(_delete_batch(deleter, batch, objs))
    return [outcomes[p] for p in prefixes]


def _survey(store: Store, prefixes: list[str]) -> tuple[dict[str, list[ObjectInfo]], list[str]]:
    """The objects under each directory and every link met, listed now.

    Many directories of one parent (a shard's generations) are found by one walk of the
    parent instead of one walk each; a few are listed one by one (a big shard with little
    to collect is not walked whole).
    """
    objs: dict[str, list[ObjectInfo]] = {p: [] for p in prefixes}
    by_parent: dict[str, list[str]] = defaultdict(list)
    for prefix in objs:
        by_parent[prefix.rpartition("/")[0]].append(prefix)
    links: list[str] = []
    for parent, group in by_parent.items():
        for root in [parent] if len(group) > PER_DIRECTORY_LISTING_MAX else group:
            found, found_links = store.list_with_links(f"{root}/")
            links += found_links
            for o in found:
                owner = f"{parent}/{o.key[len(parent) + 1:].split('/', 1)[0]}"
                if owner in objs and o.key.startswith(owner + "/"):
                    objs[owner].append(o)
    return objs, links


def _batches(prefixes: list[str], objs: dict[str, list[ObjectInfo]]) -> Iterator[list[str]]:
    """Whole directories grouped until a group holds about BATCH_OBJECTS objects."""
    batch: list[str] = []
    count = 0
    for prefix in prefixes:
        batch.append(prefix)
        count += len(objs[prefix])
        if count >= BATCH_OBJECTS:
            yield batch
            batch, count = [], 0
    if batch:
        yield batch


def _delete_batch(deleter: Callable[[list[str]], set[str]], batch: list[str],
                  objs: dict[str, list[ObjectInfo]]) -> dict[str, PrefixOutcome]:
    """Two steps: every manifest of the batch, then the other files of the directories whose
    manifests all went. ``deleter`` deletes keys and returns those refused."""
    owner: dict[str, str] = {}
    for prefix in batch:
        for o in objs[prefix]:
            _check_under(o.key, prefix)
            owner[o.key] = prefix
    deleted: Counter[str] = Counter()
    freed: Counter[str] = Counter()
    refused: dict[str, list[str]] = defaultdict(list)

    def delete(items: list[ObjectInfo]) -> None:
        no = deleter([o.key for o in items])
        for o in items:
            if o.key in no:
                refused[owner[o.key]].append(o.key)
            else:
                deleted[owner[o.key]] += 1
                freed[owner[o.key]] += o.size

    delete([o for p in batch for o in objs[p] if _is_manifest(o.key, p)])
    delete([o for p in batch if p not in refused for o in objs[p] if not _is_manifest(o.key, p)])
    return {p: PrefixOutcome(deleted[p], freed[p], sorted(refused.get(p, []))) for p in batch}


def _is_manifest(key: str, prefix: str) -> bool:
    """Whether ``key`` is a Lance table manifest of a dataset under ``prefix`` (they go first)."""
    return "/_versions/" in key[len(prefix):]


def delete_keys(store: Store, keys: list[str], *, before_batch: Callable[[], None] | None = None) -> list[str]:
    """Delete single objects (WAL entries) in batches, ``before_batch`` before each; returns the keys refused."""
    refused: set[str] = set()
    with ThreadPoolExecutor(DELETE_THREADS) as pool:
        for i in range(0, len(keys), BATCH_OBJECTS):
            if before_batch:
                before_batch()
            refused |= _delete_concurrently(store, pool, keys[i:i + BATCH_OBJECTS])
    return [k for k in keys if k in refused]


def _delete_concurrently(store: Store, pool: ThreadPoolExecutor, keys: list[str]) -> set[str]:
    """:func:`delete_objects` over consecutive slices of ``keys`` at once; returns the keys refused.

    Every slice goes through the same per-key checks; running them at once overlaps the
    latency of the requests of an object store. The call returns when every slice is done,
    so what the caller orders across calls stays ordered.
    """
    step = max(DELETE_SLICE_MIN, -(-len(keys) // DELETE_THREADS))
    per_request = getattr(store, "delete_batch", 0)  # an object store's keys per delete request
    if per_request > 1:
        step = -(-step // per_request) * per_request  # whole requests: 1,000 keys each on S3, not 375
    slices = [keys[i:i + step] for i in range(0, len(keys), step)]
    if len(slices) <= 1:
        return set(delete_objects(store, keys))
    return {k for refused in pool.map(partial(delete_objects, store), slices) for k in refused}


class LocalGcEngine:
    """Deletes in-process, through the same :func:`delete_prefixes` / :func:`delete_keys` as Spark,
    checking the lease before every batch."""

    name = "local"

    def delete_prefixes(self, table: Table, prefixes: list[str], lease: Lease | None) -> list[PrefixOutcome]:
        return delete_prefixes(table.store, prefixes, before_batch=lease.check if lease else None)

    def delete_keys(self, table: Table, keys: list[str], lease: Lease | None) -> list[str]:
        """Delete single objects (WAL entries); returns the keys refused as unsafe."""
        return delete_keys(table.store, keys, before_batch=lease.check if lease else None)


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
        _check_under(w.key, f"{shard_dir(w.shard_id)}/wal")
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


def expire_versions(table: Table, older_than_seconds: float, *, keep: list[Checkpoint] = ()) -> dict:
    """Lance's own cleanup of old versions (it keeps tagged versions and the latest).

    A live checkpoint's version carries its tag, except for the moment between the record's
    creation and the tag's: such a version is kept by expiring less (``older_than`` moved
    past its age), never by trusting that the tag will arrive in time. The published file
    snapshot is kept (hazard H3): a copy under the live MemWAL entry's own path, which the
    cleanup keeps, before and after it (memwal.snapshot.locate).
    """
    from memwal.snapshot.locate import hold_snapshot_file, keep_snapshot_file

    tagged = {t["version"] for t in table.dataset().tags.list().values()}
    ages = [time.time() - table.manifest(c.version).timestamp for c in keep if c.version not in tagged]
    older_than_seconds = max([older_than_seconds, *(age + 1.0 for age in ages)])
    held = hold_snapshot_file(table)
    kept = [keep_snapshot_file(table, held)] if held else []
    # A fresh handle: Lance's cleanup keeps the version its handle was opened at as the latest.
    stats = table.dataset().cleanup_old_versions(
        older_than=timedelta(seconds=older_than_seconds), error_if_tagged_old_versions=False
    )
    if held:
        kept.append(keep_snapshot_file(table, held))
    return {"older_than_seconds": older_than_seconds, "bytes_removed": stats.bytes_removed,
            "old_versions": stats.old_versions, "snapshot_file_kept": [k for k in kept if k]}


def render_gc(doc: dict) -> str:
    """The human summary of a GC document (a result or a dry run): what went, per shard as
    generation ranges (a run may collect thousands), then why the rest stays and what would
    free it."""
    verb = "would delete" if doc["dry_run"] else "deleted"
    lines = [f"{doc['table']}: {verb} {len(doc['deleted'])} generations and {doc['wal_entries_deleted']} WAL entries"
             + ("" if doc["dry_run"] else f", {doc['bytes_freed']} bytes freed")]
    by_shard: dict[str, list[int]] = defaultdict(list)
    for d in doc["deleted"]:
        by_shard[d["shard_id"]].append(d["generation"])
    for shard_id, gens in sorted(by_shard.items()):
        lines.append(f"  {verb} shard {shard_id} generations {_ranges(gens)}")
    gates = Counter(" + ".join(r for r in (b.get("reasons") or [b["reason"]]) if " " not in r and "/" not in r)
                    for b in doc["blocked"])
    for reasons, n in sorted(gates.items()):
        lines.append(f"  blocked: {n} x {reasons}")
    for reason, n in sorted(Counter(k["reason"] for k in doc.get("kept_wal_entries", [])).items()):
        why = ("the writer replays it after a crash" if reason == WAL_NEEDED_FOR_REPLAY
               else "it fences out older writers")
        lines.append(f"  kept: {n} WAL entr{'y' if n == 1 else 'ies'} x {reason} ({why})")
    if doc.get("retention"):
        lines.append(f"  retained versions: {doc['retention']['hint']}")
    if doc.get("time_will_free"):
        waiting = sum(1 for b in doc["blocked"] if b.get("reasons", [b["reason"]]) == [GRACE_PERIOD])
        lines.append(f"  {waiting} generation(s) wait only for the reader grace period: a later run frees them")
    for o in doc["orphans"]:
        lines.append(f"  orphan {o['kind']} {o['key']} ({o['age_seconds']:.0f}s old)"
                     + ("" if doc.get("orphans_deleted") else ": kept (use --orphans)"))
    return "\n".join(lines)


def _ranges(values: list[int]) -> str:
    """``1-4, 7, 9-10`` for [1, 2, 3, 4, 7, 9, 10]."""
    out: list[str] = []
    vs = sorted(set(values))
    start = prev = vs[0]
    for v in [*vs[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(out)


def write_audit(table: Table, result: GcResult) -> str:
    """Persist the run's record (what went, which gates allowed it) in the table's store."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    key = f"{JOBS_DIR}/audit/gc-{stamp}-{uuid.uuid4().hex[:8]}.json"
    table.store.put_if_absent(key, json.dumps(result.to_json(), indent=2, default=str).encode())
    return key


def check_audit_destination(store: Store) -> None:
    """Refuse, before anything is written, an audit folder that cannot hold the record.

    The record is written after the deletions; finding out only then would leave a run
    that deleted data without its record.
    """
    for key in (JOBS_DIR, f"{JOBS_DIR}/audit"):
        if store.head(key) is not None:
            raise BadInputError(f"{store.uri_for(key)} is a file, not a folder: the GC audit record cannot go there")


def plan_gc_settled(table: Table, **options) -> GcPlan:
    """:func:`plan_gc`, planned again when a listed object vanished before it was read.

    A concurrent GC deletes WAL entries and generations between our listing and our read:
    that is a lost race, not bad input, so we list again (what it deleted is then absent).
    """
    last: NotFoundError | None = None
    for attempt in range(PLAN_ATTEMPTS):
        try:
            return plan_gc(table, **options)
        except NotFoundError as exc:
            last = exc
            log.info("gc %s: %s vanished while planning (attempt %d): planning again", table.uri, exc, attempt + 1)
    raise MemWalError(f"{table.uri}: objects kept vanishing while GC planned (a concurrent GC?): {last}")


def prepare_gc(table: Table, *, audit: bool = False, **options) -> GcPlan:
    """Everything a GC run reads, checked before its first write (lease, expiry, deletion, audit)."""
    if audit:
        check_audit_destination(table.store)
    return plan_gc_settled(table, **options)


def recheck_gc_plan(table: Table, plan: GcPlan, checkpoints: list[Checkpoint] | None = None) -> GcPlan:
    """Right before deleting, re-read the latest table version once and drop what it no longer allows.

    Merge progress and catch-up only grow in normal operation, but a table restored to an
    older version, or a commit that drops catch-up records (Lance's own compaction does),
    lowers them after the plan was made: generations above the new values are needed again.
    ``checkpoints`` are the live checkpoints read after the GC marker was written: a
    checkpoint created since the plan keeps what it pins.
    """
    latest = table.require_mem_wal()
    indexes = [i for i in maintained_indexes(latest) if i != MEM_WAL_INDEX_NAME]
    pins = checkpoints or []

    def lost(shard_id: str, g: int, *, catchup: bool = True) -> str | None:
        if g > latest.compacted_generation(shard_id):
            return "not-merged"
        for name in indexes if catchup else []:
            if g > latest.index_catchup.get(name, {}).get(shard_id, 0):
                return f"index-not-caught-up:{name}"
        for c in pins:
            if c.pins(shard_id, g):
                return f"checkpoint:{c.id}"
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
    result.deleted = [{"shard_id": g.shard_id, "generation": g.generation, "path": g.path, "gates": g.gates}
                      for g in plan.generations]
    result.wal_entries_deleted = len(plan.wal_entries)
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
    unusable audit folder fails with nothing written. Version expiry can only remove
    holders of the retained-version gate, but it can also remove the version that first
    merged a generation, which moves the grace period's evidence later; so the run plans
    again after expiry and deletes on that plan (possibly less than the first, never
    more than what the table allows). The plan is checked against the latest table
    version once more right before deleting.
    """
    options = dict(grace_seconds=grace_seconds, orphan_age_seconds=orphan_age_seconds,
                   history_retention_seconds=history_retention_seconds, now=now)
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
        expired = None
        if expire_versions_seconds is not None:
            if lease:
                lease.check()
            expired = expire_versions(table, expire_versions_seconds, keep=live)
            try:
                plan = plan_gc_settled(table, **options)
            except BadInputError as exc:  # versions were expired already: no longer "nothing written"
                raise MemWalError(str(exc)) from exc
        plan = recheck_gc_plan(table, plan, live)
        steps.step("gc.before-delete")
        result = execute_gc(table, plan, engine, lease=lease, orphans=orphans)
        if plan.history_keys:
            delete_objects(table.store, plan.history_keys)
            result.history_pruned = len(plan.history_keys)
        gone = {c.id for c in list_checkpoints(table) if not c.live(clocks.current()())}
        result.checkpoints_removed = remove_checkpoints(
            table, [c for c in list_checkpoints(table) if c.id in gone and c.id in plan.expired_checkpoints])
    finally:
        gc_finished(table.store, run_id)
    result.expired_versions = expired
    result.broken_shards = plan.broken_shards
    steps.step("gc.after-delete")
    if audit:
        result.audit_key = write_audit(table, result)
    log.info("gc %s: %d generations, %d WAL entries, %d bytes freed, %d blocked", table.uri, len(result.deleted),
             result.wal_entries_deleted, result.bytes_freed, len(result.blocked))
    return result
