"""Running a compaction plan: the rewrite tasks, one commit, progress kept, catch-up re-earned.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from lance.optimize import Compaction, CompactionOptions

from memwal.catchup import CatchupEngine, CatchupThresholds, LocalCatchupEngine, execute_catchup, plan_catchup
from memwal.compact.engine import CompactEngine, LocalCompactEngine
from memwal.compact.plan import CompactPlan, plan_compaction
from memwal.core import steps
from memwal.core.document import Document, as_document
from memwal.core.retry import after_conflict, vanished
from memwal.errors import CancelledError, ConflictError, MemWalError, StateMovedError
from memwal.history import run as history
from memwal.table import Table
from memwal.table.manifest import TableManifest, maintained_indexes
from memwal.table.versions_cursor import versions_since

if TYPE_CHECKING:
    from memwal.lease import Lease

log = logging.getLogger(__name__)
Step = Callable[[str], None]


#: How often the index catch-up is re-earned before giving up: a merge committing between
#: the catch-up's read and its commit can leave a new fragment uncovered.
CATCHUP_ATTEMPTS = 4


@dataclass(frozen=True)
class IndexCatchup:
    """A maintained index's catch-up read back from the table manifest after the job."""

    index_name: str
    caught_up: dict[str, int]
    recorded: bool  # caught up to the merge progress of every shard (what GC waits for)
    kept: bool  # at least what was recorded before the compaction


@dataclass(frozen=True)
class CompactResult(Document):
    """What a compaction did (``memwal compact --json``).

    Attributes:
        table: The table's URI.
        version: The new table version, or None when nothing was rewritten.
        fragments_before: Fragments before the run.
        fragments_after: Fragments after it.
        fragments_removed: Fragments rewritten away.
        fragments_added: Fragments written.
        deletions_materialized: Deleted rows removed from the files.
        indexes: Each maintained index's catch-up after the run.
        engine: ``"local"`` or ``"spark"``.
        attempts: Plans made: a commit conflict re-plans and retries.
        catchup_repaired: Whether the run re-earned a catch-up record an earlier compaction lost.
    """

    table: str
    version: int | None
    fragments_before: int
    fragments_after: int
    fragments_removed: int = 0
    fragments_added: int = 0
    deletions_materialized: int = 0
    indexes: tuple[IndexCatchup, ...] = ()
    engine: str = "local"
    attempts: int = 1
    catchup_repaired: bool = False

    def to_dict(self) -> dict[str, Any]:
        return as_document(self)

    def problems(self) -> list[str]:
        """What makes this run a failure: nothing here (a failed compaction raises, exit 1 or 3)."""
        return []


def execute_compaction(table: Table, plan: CompactPlan, engine: CompactEngine | None = None, *,
                       lease: Lease | None = None, on_step: Step | None = None,
                       catchup_engine: CatchupEngine | None = None) -> CompactResult:
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
        lease.check(safe_to_stop=True)
    rewrites = engine.run_tasks(table, plan)
    step("after-tasks")
    if lease:
        try:
            lease.check(safe_to_stop=True)  # the rewrites are not committed: a cancel leaves the table as it was
        except CancelledError:
            _discard(table, rewrites)
            raise
    # Committed against the plan's read version: Lance rebases it over concurrent appends and
    # rejects it (retryably) when a concurrent merge changed a fragment it rewrote.
    before = table.dataset().version
    metrics = Compaction.commit(table.dataset(plan.read_version), rewrites)
    committed = table.dataset().version
    _record_compaction_commits(table, before, committed)
    result = replace(result, version=committed, fragments_removed=metrics.fragments_removed,
                     fragments_added=metrics.fragments_added,
                     deletions_materialized=sum(t.deleted_rows for t in plan.tasks))
    log.info("compacted %s: %d fragments rewritten as %d", table.uri, metrics.fragments_removed,
             metrics.fragments_added)
    check_progress_kept(table, plan.read_version)
    step("after-commit")
    # Our own commit dropped the catch-up record (H4): re-earning it repairs what we did, so it
    # runs even if the lease was lost meanwhile (as the snapshot's H1 repairs do); the job
    # still ends with exit 3 then (memwal.actions checks every lease after the job).
    version = restore_catchup(table, plan.catchup_to_keep(), catchup_engine, lease=None)
    result = finish(table, plan.catchup_to_keep(), replace(result, version=version or committed))
    step("after-catchup")
    return result


def _discard(table: Table, rewrites: list[Any]) -> None:
    """Remove the files of rewrites that will never be committed (a cancelled compaction)."""
    from memwal.merge.driverless import data_file_keys, remove_uncommitted

    keys = [k for r in rewrites for fragment in r.new_fragments for k in data_file_keys(fragment)]
    try:
        remove_uncommitted(table, keys)
    except MemWalError as exc:  # the cancel matters more; Lance's cleanup removes files no version names
        log.warning("compact %s: rewritten files left uncommitted: %s", table.uri, exc)


def _record_compaction_commits(table: Table, before: int, version: int) -> None:
    """Name the compaction's commits in the run's history. ``Compaction.commit`` makes two:
    it first reserves the new fragments' ids (``ReserveFragments``, which pylance 14 reads
    back only as an opaque ``BaseOperation``), then commits the rewrite; a concurrent writer's
    commits in between read back as what they are (Append, Update...) and stay theirs."""
    history.committed(table, version)
    ds = table.dataset()
    for v in range(before + 1, version):
        try:
            txn = ds.read_transaction(v)
        except (OSError, ValueError, RuntimeError, TypeError):
            continue
        if txn is not None and type(txn.operation).__name__ == "BaseOperation":
            history.committed(table, v)


def check_progress_kept(table: Table, since_version: int) -> None:
    """Merge progress never went down in any version from ``since_version`` on.

    The compaction commit carries the MemWAL index details of the version it rebased on;
    should it ever carry stale ones, merge progress written concurrently would be lost and
    the next merge would re-apply generations: stop loudly instead.
    """
    versions = versions_since(table.store, since_version)
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


def restore_catchup(table: Table, before: dict[str, dict[str, int]], catchup_engine: CatchupEngine | None = None, *,
                    lease: Lease | None = None) -> int | None:
    """Re-earn the catch-up record the compaction commit dropped, and read it back.

    Lance remapped the indexes to the new fragments during the commit, so the catch-up
    job's incremental optimisation only has to make the commit that records the catch-up
    (or a rebuild, when its thresholds say so). A merge committing meanwhile can leave a
    fragment uncovered: re-plan and retry. Returns the version of the last catch-up commit.
    """
    engine = catchup_engine or LocalCatchupEngine()
    versions: list[int] = []

    def attempt(_n: int) -> int | None:
        done = execute_catchup(table, plan_catchup(table, thresholds=CatchupThresholds()), engine, lease=lease)
        if done.version is not None:
            versions.append(done.version)
        behind = _behind(before, table.manifest())
        if not done.all_recorded or behind:
            raise ConflictError(f"catch-up not recorded yet ({', '.join(behind) or 'a concurrent commit'})")
        return versions[-1] if versions else None

    try:
        return after_conflict(attempt, what=f"{table.uri}: index catch-up after compaction", attempts=CATCHUP_ATTEMPTS)
    except ConflictError as exc:
        raise MemWalError(f"{table.uri}: compacted, but the catch-up of indexes "
                          f"{', '.join(_behind(before, table.manifest())) or 'maintained'} could not be re-earned "
                          "(concurrent writers kept winning); run `memwal catchup`") from exc


def finish(table: Table, before: dict[str, dict[str, int]], result: CompactResult) -> CompactResult:
    """The result with its fragment count and catch-up read back from the latest manifest."""
    after = table.manifest()
    indexes: list[IndexCatchup] = []
    for name in maintained_indexes(after):
        caught = {s: after.index_catchup.get(name, {}).get(s, 0) for s in after.compacted}
        recorded = all(caught[s] >= g for s, g in after.compacted.items())
        indexes.append(IndexCatchup(name, caught, recorded, not _behind({name: before.get(name, {})}, after)))
    behind = _behind(before, after)
    if behind:
        raise MemWalError(f"{table.uri}: index catch-up of {', '.join(behind)} went backwards during compaction")
    return replace(result, fragments_after=len(table.dataset(after.version).get_fragments()), indexes=tuple(indexes))


def run_compact(table: Table, *, plan: CompactPlan | None = None, options: CompactionOptions | None = None,
                engine: CompactEngine | None = None, lease: Lease | None = None,
                catchup_engine: CatchupEngine | None = None, max_attempts: int = 6, on_step: Step | None = None,
                sleep: Callable[[float], None] = time.sleep) -> CompactResult:
    """Execute ``plan`` (or a fresh one with Lance's compaction ``options``), re-planning with
    the same options only after a commit conflict.

    When nothing is worth compacting nothing is committed, unless the plan says an earlier
    run committed its compaction and stopped before re-earning the index catch-up: that
    repair is a step of the plan (the dry run shows it), done here.
    """
    engine = engine or LocalCompactEngine()

    def attempt(n: int) -> CompactResult:
        p = plan if n == 1 and plan is not None else plan_compaction(table, plan.options if plan else options)
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
        return replace(result, attempts=n)

    return after_conflict(attempt, what=f"{table.uri}: compaction (nothing of a lost attempt was committed)",
                          attempts=max_attempts, sleep=sleep)


def _nothing_to_compact(table: Table, plan: CompactPlan, engine: CompactEngine, *, lease: Lease | None,
                        catchup_engine: CatchupEngine | None) -> CompactResult:
    result = CompactResult(table=table.uri, version=None, fragments_before=plan.fragments_before,
                           fragments_after=plan.fragments_before, engine=engine.name)
    if plan.catchup_repair:
        log.warning("%s: indexes %s lost their catch-up record to an earlier compaction; re-earning it",
                    table.uri, ", ".join(plan.catchup_repair))
        result = replace(result, version=restore_catchup(table, plan.catchup_to_keep(), catchup_engine, lease=lease),
                         catchup_repaired=True)
    return finish(table, plan.catchup_to_keep(), result)
