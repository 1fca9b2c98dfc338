"""Fragment compaction of the base table, keeping merge progress and index catch-up.

Every merge adds fragments and deletion files, and nothing else removes them, so reads
slow down. Lance's own compaction fixes that, but on a MemWAL table its commit drops
``index_catchup`` for every index (garbage collection then waits for a later commit that
re-earns it). This job runs Lance's compaction the distributed way (plan on the driver,
one task per rewrite group on an engine, one commit), then re-earns the catch-up record
through the catch-up job's own functions and reads it back.

``plan_compaction`` is pure (the dry run); ``execute_compaction`` takes exactly that plan.
``run_compact`` re-plans after a commit conflict with a concurrent writer (a merge that
touched the same fragments): the rewrite was made against an older version, so it must
be redone against the new one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from lance.optimize import Compaction, CompactionTask, RewriteResult

from memwal.actions.options import CompactOptions
from memwal.catchup import CatchupThresholds, LocalCatchupEngine, execute_catchup, plan_catchup
from memwal.core import steps
from memwal.core.retry import after_conflict, is_conflict, vanished
from memwal.errors import MemWalError, StateMovedError, first_line
from memwal.history import run as history
from memwal.inspect.status import maintained_indexes
from memwal.table import Table
from memwal.table.manifest import TableManifest, list_versions

if TYPE_CHECKING:
    from memwal.lease import Lease

log = logging.getLogger(__name__)

Step = Callable[[str], None]

#: How often the index catch-up is re-earned before giving up: a merge committing between
#: the catch-up's read and its commit can leave a new fragment uncovered.
CATCHUP_ATTEMPTS = 4


def lance_options(options: CompactOptions) -> dict[str, Any]:
    """Lance's ``CompactionOptions`` (unset values keep Lance's and the table config's defaults)."""
    out: dict[str, Any] = {
        "target_rows_per_fragment": options.target_rows_per_fragment,
        "max_rows_per_group": options.max_rows_per_group,
        "materialize_deletions_threshold": options.materialize_deletions_threshold,
        "max_source_fragments": options.max_fragments,
    }
    return {k: v for k, v in out.items() if v is not None}


@dataclass
class TaskPlan:
    """One rewrite group: adjacent fragments Lance will rewrite as one or a few fragments."""

    fragment_ids: list[int]
    rows: int
    deleted_rows: int


@dataclass
class CompactPlan:
    table: str
    read_version: int
    options: dict[str, Any]
    fragments_before: int
    compacted: dict[str, int]
    index_catchup: dict[str, dict[str, int]]
    indexes: list[str]
    tasks: list[TaskPlan] = field(default_factory=list)
    #: Lance's task objects, in the order of ``tasks`` (picklable; not part of the JSON).
    lance_tasks: list[CompactionTask] = field(default_factory=list, repr=False)

    def is_empty(self) -> bool:
        return not self.tasks

    def catchup_to_keep(self) -> dict[str, dict[str, int]]:
        """The catch-up recorded at the read version for the maintained indexes: what the
        compaction must leave recorded (or higher) when it is done."""
        return {name: shards for name, shards in self.index_catchup.items() if name in self.indexes}

    def to_json(self) -> dict:
        return {
            "table": self.table,
            "read_version": self.read_version,
            "options": self.options,
            "fragments_before": self.fragments_before,
            "fragments_to_rewrite": sum(len(t.fragment_ids) for t in self.tasks),
            "deletions_to_materialize": sum(t.deleted_rows for t in self.tasks),
            "compacted": self.compacted,
            "index_catchup": self.index_catchup,
            "tasks": [asdict(t) for t in self.tasks],
        }


@dataclass
class IndexCatchup:
    """A maintained index's catch-up read back from the table manifest after the job."""

    index_name: str
    caught_up: dict[str, int]
    recorded: bool  # caught up to the merge progress of every shard (what GC waits for)
    kept: bool  # at least what was recorded before the compaction


@dataclass
class CompactResult:
    table: str
    version: int | None
    fragments_before: int
    fragments_after: int
    fragments_removed: int = 0
    fragments_added: int = 0
    deletions_materialized: int = 0
    indexes: list[IndexCatchup] = field(default_factory=list)
    engine: str = "local"
    attempts: int = 1
    catchup_repaired: bool = False

    def to_json(self) -> dict:
        return asdict(self)


class CompactEngine(Protocol):
    """Runs a plan's Lance tasks (local: in-process; spark: one Spark task per Lance task)."""

    name: str

    def run_tasks(self, table: Table, plan: CompactPlan) -> list[RewriteResult]: ...


class LocalCompactEngine:
    name = "local"

    @classmethod
    def from_active_or_local(cls) -> LocalCompactEngine:
        return cls()

    def run_tasks(self, table: Table, plan: CompactPlan) -> list[RewriteResult]:
        ds = table.dataset(plan.read_version)
        return [task.execute(ds) for task in plan.lance_tasks]


def plan_compaction(table: Table, options: CompactOptions | None = None,
                    manifest: TableManifest | None = None) -> CompactPlan:
    """Pure: which fragments Lance would rewrite, and the progress the commit must keep."""
    options = options or CompactOptions()
    manifest = manifest or table.require_mem_wal()
    ds = table.dataset(manifest.version)
    lance_opts = lance_options(options)
    try:
        lance_plan = Compaction.plan(ds, lance_opts)
    except (ValueError, OSError, RuntimeError) as exc:
        raise MemWalError(f"{table.uri}: cannot plan the compaction: {first_line(exc)}") from exc
    plan = CompactPlan(
        table=table.uri,
        read_version=manifest.version,
        options=lance_opts,
        fragments_before=len(ds.get_fragments()),
        compacted=dict(manifest.compacted),
        index_catchup={k: dict(v) for k, v in manifest.index_catchup.items()},
        indexes=maintained_indexes(manifest),
    )
    for task in lance_plan.tasks:
        frags = list(task.fragments)
        plan.tasks.append(TaskPlan([f.id for f in frags], sum(f.num_rows for f in frags),
                                   sum(f.num_deletions for f in frags)))
        plan.lance_tasks.append(task)
    return plan


def execute_compaction(table: Table, plan: CompactPlan, engine: CompactEngine | None = None, *,
                       lease: Lease | None = None, on_step: Step | None = None,
                       catchup_engine=None) -> CompactResult:
    """Run the plan's tasks, commit them once, check progress, re-earn index catch-up.

    Raises on a commit conflict (nothing committed); :func:`run_compact` re-plans.
    """
    engine = engine or LocalCompactEngine()
    step = steps.scoped("compact", on_step)
    result = CompactResult(table=table.uri, version=None, fragments_before=plan.fragments_before,
                           fragments_after=plan.fragments_before, engine=engine.name)
    if plan.is_empty():
        return result
    if lease:
        lease.check()
    rewrites = engine.run_tasks(table, plan)
    step("after-tasks")
    if lease:
        lease.check()
    # Committed against the plan's read version: Lance rebases it over concurrent appends and
    # rejects it (retryably) when a concurrent merge changed a fragment it rewrote.
    before = table.dataset().version
    metrics = Compaction.commit(table.dataset(plan.read_version), rewrites)
    result.version = table.dataset().version
    _record_compaction_commits(table, before, result.version)
    result.fragments_removed, result.fragments_added = metrics.fragments_removed, metrics.fragments_added
    result.deletions_materialized = sum(t.deleted_rows for t in plan.tasks)
    log.info("compacted %s: %d fragments rewritten as %d", table.uri, metrics.fragments_removed,
             metrics.fragments_added)
    check_progress_kept(table, plan.read_version)
    step("after-commit")
    # Our own commit dropped the catch-up record (H4): re-earning it repairs what we did, so it
    # runs even if the lease was lost meanwhile (as the snapshot's H1 repairs do); the job
    # still ends with exit 3 then (memwal.actions checks every lease after the job).
    version = restore_catchup(table, plan.catchup_to_keep(), catchup_engine, lease=None)
    result.version = version or result.version
    finish(table, plan.catchup_to_keep(), result)
    step("after-catchup")
    return result


def _record_compaction_commits(table: Table, before: int, version: int) -> None:
    """Name the compaction's commits in the run's history. ``Compaction.commit`` makes two:
    it first reserves the new fragments' ids (``ReserveFragments``, which pylance 14 reads
    back only as an opaque ``BaseOperation``), then commits the rewrite; a concurrent writer's
    commits in between read back as what they are (Append, Update...) and stay theirs."""
    history.committed(version)
    ds = table.dataset()
    for v in range(before + 1, version):
        try:
            txn = ds.read_transaction(v)
        except (OSError, ValueError, RuntimeError, TypeError):
            continue
        if txn is not None and type(txn.operation).__name__ == "BaseOperation":
            history.committed(v)


def check_progress_kept(table: Table, since_version: int) -> None:
    """Merge progress never went down in any version from ``since_version`` on.

    The compaction commit carries the MemWAL index details of the version it rebased on;
    should it ever carry stale ones, merge progress written concurrently would be lost and
    the next merge would re-apply generations: stop loudly instead.
    """
    versions = sorted(v for v in list_versions(table.store) if v >= since_version)
    last: dict[str, int] = {}
    for v in versions:
        manifest = table.manifest(v)
        for shard in sorted(set(last) | set(manifest.compacted)):
            g = manifest.compacted_generation(shard)
            if g < last.get(shard, 0):
                raise MemWalError(f"{table.uri}: merge progress of shard {shard} went from generation "
                                  f"{last[shard]} down to {g} at table version {v}")
            last[shard] = g


def _behind(before: dict[str, dict[str, int]], after: TableManifest) -> list[str]:
    """Indexes whose recorded catch-up is lower now than ``before`` for some shard."""
    return sorted(name for name, shards in before.items()
                  if any(after.index_catchup.get(name, {}).get(s, 0) < g for s, g in shards.items()))


def restore_catchup(table: Table, before: dict[str, dict[str, int]], catchup_engine=None, *,
                    lease: Lease | None = None) -> int | None:
    """Re-earn the catch-up record the compaction commit dropped, and read it back.

    Lance remapped the indexes to the new fragments during the commit, so the catch-up
    job's incremental optimisation only has to make the commit that records the catch-up
    (or a rebuild, when its thresholds say so). A merge committing meanwhile can leave a
    fragment uncovered: re-plan and retry. Returns the version of the last catch-up commit.
    """
    engine = catchup_engine or LocalCatchupEngine()
    version = None
    for attempt in range(1, CATCHUP_ATTEMPTS + 1):
        plan = plan_catchup(table, thresholds=CatchupThresholds())
        try:
            done = execute_catchup(table, plan, engine, lease=lease)
        except (OSError, RuntimeError) as exc:
            if not is_conflict(exc) or attempt == CATCHUP_ATTEMPTS:
                raise
            log.warning("index catch-up after compaction conflicted (%s); retrying", first_line(exc))
            continue
        version = done.version or version
        behind = _behind(before, table.manifest())
        if done.all_recorded and not behind:
            return version
        log.warning("index catch-up after compaction not recorded yet (%s); retrying",
                    ", ".join(behind) or "concurrent commit")
    raise MemWalError(f"{table.uri}: compacted, but the catch-up of indexes "
                      f"{', '.join(_behind(before, table.manifest())) or 'maintained'} could not be re-earned; "
                      "run `memwal catchup`")


def finish(table: Table, before: dict[str, dict[str, int]], result: CompactResult) -> None:
    """Fill the result's fragment count and catch-up read back from the latest manifest."""
    after = table.manifest()
    result.fragments_after = len(table.dataset(after.version).get_fragments())
    result.indexes = []
    for name in maintained_indexes(after):
        caught = {s: after.index_catchup.get(name, {}).get(s, 0) for s in after.compacted}
        recorded = all(caught[s] >= g for s, g in after.compacted.items())
        result.indexes.append(IndexCatchup(name, caught, recorded, not _behind({name: before.get(name, {})}, after)))
    behind = _behind(before, after)
    if behind:
        raise MemWalError(f"{table.uri}: index catch-up of {', '.join(behind)} went backwards during compaction")


def dropped_catchup(table: Table, manifest: TableManifest) -> list[str]:
    """Maintained indexes left without a catch-up record by an earlier compaction.

    The signature of a compaction that committed but crashed before re-earning: progress
    exists, the index covers every row (nothing unindexed), yet no record. An index that
    merely lags after a merge has unindexed rows, and is the catch-up job's business.
    """
    if not manifest.compacted:
        return []
    ds = table.dataset(manifest.version)
    out = []
    for name in maintained_indexes(manifest):
        if name in manifest.index_catchup:
            continue
        try:
            unindexed = int(ds.stats.index_stats(name).get("num_unindexed_rows", 0))
        except (ValueError, OSError, RuntimeError):
            continue
        if unindexed == 0:
            out.append(name)
    return out


def run_compact(table: Table, *, plan: CompactPlan | None = None, options: CompactOptions | None = None,
                engine: CompactEngine | None = None, lease: Lease | None = None, catchup_engine=None,
                max_attempts: int = 6, on_step: Step | None = None,
                sleep: Callable[[float], None] = time.sleep) -> CompactResult:
    """Execute ``plan`` (or a fresh one), re-planning only after a commit conflict.

    When nothing is worth compacting nothing is committed, unless an earlier run committed
    its compaction and stopped before re-earning the index catch-up: that is finished here.
    """
    engine = engine or LocalCompactEngine()

    def attempt(n: int) -> CompactResult:
        p = plan if n == 1 and plan is not None else plan_compaction(table, options)
        if p.is_empty():
            return _nothing_to_compact(table, p, engine, lease=lease, catchup_engine=catchup_engine)
        try:
            result = execute_compaction(table, p, engine, lease=lease, on_step=on_step,
                                        catchup_engine=catchup_engine)
        except (OSError, ValueError, RuntimeError) as exc:
            # A file of the plan's read version removed by a concurrent version cleanup.
            if vanished(exc) and table.manifest().version > p.read_version:
                raise StateMovedError(f"{table.uri}: version {p.read_version} expired while compacting") from exc
            raise
        result.attempts = n
        return result

    return after_conflict(attempt, what=f"{table.uri}: compaction (nothing of a lost attempt was committed)",
                          attempts=max_attempts, sleep=sleep)


def _nothing_to_compact(table: Table, plan: CompactPlan, engine: CompactEngine, *, lease: Lease | None,
                        catchup_engine) -> CompactResult:
    result = CompactResult(table=table.uri, version=None, fragments_before=plan.fragments_before,
                           fragments_after=plan.fragments_before, engine=engine.name)
    dropped = dropped_catchup(table, table.manifest(plan.read_version))
    if dropped:
        log.warning("%s: indexes %s lost their catch-up record to an earlier compaction; re-earning it",
                    table.uri, ", ".join(dropped))
        result.version = restore_catchup(table, plan.catchup_to_keep(), catchup_engine, lease=lease)
        result.catchup_repaired = True
    finish(table, plan.catchup_to_keep(), result)
    return result
