"""Planning GC: what may go, and for everything that may not, every gate that holds it.

Pure: it reads manifests, listings and checkpoints and writes nothing (the dry run).
The gates themselves are in :mod:`memwal.gc.gates`.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

from memwal.checkpoint import Checkpoint, list_checkpoints
from memwal.core import clock as clocks
from memwal.core.retry import after_conflict
from memwal.errors import BadInputError, ConflictError, MemWalError, NotFoundError, StateMovedError, UnsafePathError
from memwal.gc.delete import survey
from memwal.gc.gates import (
    DEFAULT_GRACE_SECONDS,
    FENCE_SENTINEL,
    GRACE_PERIOD,
    WAL_NEEDED_FOR_REPLAY,
    Blocked,
    HeldGeneration,
    retention_report,
    verdict_of,
)
from memwal.gc.model import GcPlan, GenerationDeletion, KeptWal, WalDeletion
from memwal.gc.orphans import plan_generation_orphans, plan_staging_orphans, plan_unsafe_links
from memwal.gc.versions import VersionProgress
from memwal.history.log import expired_history
from memwal.history.run import current as current_run
from memwal.store import Store
from memwal.table import Table
from memwal.table.manifest import maintained_indexes
from memwal.table.naming import JOBS_DIR, MEM_WAL_DIR, MEM_WAL_INDEX_NAME
from memwal.table.paths import generation_key
from memwal.table.retained import RetainedVersion, retained_versions
from memwal.table.shards import (
    ShardManifestError,
    WalEntry,
    WalEntryMeta,
    list_generation_dirs,
    list_wal_entries,
    read_shard_manifests,
    read_wal_entry_metas,
)

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


DEFAULT_ORPHAN_AGE_SECONDS = 3600.0


#: Plans retried when a listed object vanished before it was read (a concurrent GC).
PLAN_ATTEMPTS = 5


def plan_gc(
    table: Table,
    *,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    orphan_age_seconds: float = DEFAULT_ORPHAN_AGE_SECONDS,
    history_retention_seconds: float | None = None,
    expire_versions_seconds: float | None = None,
    now: float | None = None,
) -> GcPlan:
    """Pure: what may go and, for everything that may not, which gate holds it.

    With ``expire_versions_seconds``, the version expiry is a step of the plan: the versions
    Lance's cleanup will remove are named, and every gate is computed without them, so the
    dry run lists exactly what the run deletes (:func:`expiring_versions`).
    """
    now = clocks.current()() if now is None else now
    latest = table.require_mem_wal()
    indexes = [i for i in maintained_indexes(latest) if i != MEM_WAL_INDEX_NAME]
    versions = retained_versions(table)
    ckpts = list_checkpoints(table)
    live = tuple(c for c in ckpts if c.live(now))
    plan = GcPlan(table=table.uri, read_version=latest.version, planned_at=now, grace_seconds=grace_seconds,
                  retained_versions=len(versions), older_than_seconds=expire_versions_seconds, versions=versions)
    _warn_lost_views(table, versions, live)
    if expire_versions_seconds is not None:
        plan.expire_before, gone = expiring_versions(versions, latest.version, expire_versions_seconds, live, now)
        plan.expiring = sorted(v.version for v in gone)
        versions = [v for v in versions if v not in gone]
    plan.checkpoints = [{"id": c.id, "name": c.name, "version": c.version, "expires_at": c.expires_at}
                        for c in live]
    plan.expired_checkpoints = [c.id for c in ckpts if not c.live(now)]
    held: list[HeldGeneration] = []  # per merged generation a retained version blocks
    by_shard = VersionProgress(versions)
    found = read_shard_manifests(table.store)
    for err in found.broken.values():
        _plan_broken_shard(table.store, err, plan)
    for shard_id, state in found.states.items():
        compacted = latest.compacted_generation(shard_id)
        dirs = list_generation_dirs(table.store, shard_id)
        present = {g: name for name, g in dirs.items()}
        deletable: set[int] = set()
        progress = by_shard.shard(shard_id)
        gates = partial(verdict_of, shard_id, compacted=compacted, catchup=latest.index_catchup, indexes=indexes,
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
        plan_generation_orphans(table.store, state, dirs, gates, now, orphan_age_seconds, plan)
    plan_staging_orphans(table.store, now, orphan_age_seconds, plan)
    # path safety (A): the links under _mem_wal/ and the planned generations' files, one walk on a local disk;
    # _jobs/ is walked apart for its links only, by name: a stat per record of a year of runs cost 0.45 s.
    files, links = survey(table.store, [g.key for g in plan.generations], links_under=MEM_WAL_DIR,
                          skip=(JOBS_DIR,))
    plan_unsafe_links(plan, sorted(set(links) | set(table.store.list_links(f"{JOBS_DIR}/"))))
    for g in plan.generations:
        g.objects, g.bytes = len(files[g.key]), sum(o.size for o in files[g.key])
    plan.retention = retention_report(held, now, grace_seconds)
    plan.time_will_free = any(b.reasons == [GRACE_PERIOD] for b in plan.blocked)
    if history_retention_seconds is not None:
        me = current_run()
        plan.history_keys = expired_history(table.store, now - history_retention_seconds,
                                            keep_run=None if me is None else me.run_id)
    return plan


def expiring_versions(versions: list[RetainedVersion], latest: int, older_than_seconds: float,
                      checkpoints: tuple[Checkpoint, ...] = (), now: float | None = None,
                      ) -> tuple[float, list[RetainedVersion]]:
    """The cut-off and exactly the versions the run hands Lance's cleanup to remove.

    Main-line versions committed before ``now - older_than``, except the latest, tagged ones,
    ones a branch starts from, and every version a live checkpoint's record names: the record
    pins its version by itself, its Lance tag is a convenience that a kill between record and
    tag, or a deleted tag, leaves missing (invariant 10). The run passes Lance these numbers
    (``cleanup_old_versions(versions=...)``), never a clock difference, and re-checks the gates
    against the versions left after the cleanup.
    """
    now = clocks.current()() if now is None else now
    cutoff = now - older_than_seconds
    pinned = {c.version for c in checkpoints}
    gone = [v for v in versions if v.branch is None and v.version != latest and not v.tags
            and not v.child_branches and v.version not in pinned and v.timestamp < cutoff]
    return cutoff, gone


def _warn_lost_views(table: Table, versions: list[RetainedVersion], live: tuple[Checkpoint, ...]) -> None:
    """Say which live checkpoint lost its base version (expired by hand, or before this
    fix without its tag): its view cannot be read any more. GC goes on, and still keeps the
    generations the record lists (gate f is as strict as ever)."""
    main = {v.version for v in versions if v.branch is None}
    for c in live:
        if c.version not in main:
            log.warning("%s: checkpoint %s pins table version %d, which is gone: its view can no longer be "
                        "read (delete it with memwal checkpoint delete); gc goes on", table.uri, c.id, c.version)


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
    """Every entry's schema metadata; NotFoundError for one listed and gone since (a
    concurrent GC: the plan is made again)."""
    out: list[WalEntryMeta] = []
    for entry, meta in zip(entries, read_wal_entry_metas(store, shard_id, [e.position for e in entries]), strict=True):
        if meta is None:
            raise store.not_found(entry.key)
        out.append(meta)
    return out


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
    def attempt(_n: int) -> GcPlan:
        try:
            return plan_gc(table, **options)
        except NotFoundError as exc:
            raise StateMovedError(f"{exc} vanished while planning") from exc

    try:
        return after_conflict(attempt, what=f"gc {table.uri}: planning", attempts=PLAN_ATTEMPTS)
    except ConflictError as exc:
        raise MemWalError(f"{table.uri}: objects kept vanishing while GC planned (a concurrent GC?): "
                          f"{exc.__cause__ or exc}") from exc


def prepare_gc(table: Table, *, audit: bool = False, **options) -> GcPlan:
    """Everything a GC run reads, checked before its first write (lease, expiry, deletion, audit)."""
    if audit:
        check_audit_destination(table.store)
    return plan_gc_settled(table, **options)
