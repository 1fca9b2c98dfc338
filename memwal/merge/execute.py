"""Execute a merge plan: at most two commits, the last one carrying the progress marker.

Pass 1 deletes the keys whose newest version is a tombstone, with no marker. Pass 2
upserts every other key and records ``mark_sstables_as_compacted`` for every shard in the
batch, through ``execute()`` (the uncommitted path drops the marker). When a batch has
only deletes, the delete pass is the marked pass. A crash between passes leaves progress
untouched; the rerun recomputes the same net change set, whose deletes are idempotent and
whose upserts are disjoint from them, so it converges to the same table (invariant 2).

Fencing. A lease check is not a fence: a merger can stall past its lease TTL after its
last check and commit later, while a merger that took the lease over has merged newer
generations. Every commit must therefore be harmless when its author lost the lease.

* The marked pass is fenced by Lance: a marker not greater than the recorded generation
  fails the whole commit ("Stale SSTable compaction").
* The unmarked delete pass is bound to the plan's read version V: it is built with
  ``execute_uncommitted()`` on the table as of V (so it removes only rows that existed at
  V) and committed with ``read_version=V``, so Lance resolves it against whatever was
  committed since, instead of re-applying the delete to the latest table. Observed with
  pylance 14.0.2 when another merge committed after V:

  - it updated the rows the pass deletes (re-put keys): Lance rejects the pass
    (``CommitConflictError``, retryable); the newer rows survive.
  - it deleted those rows: rejected the same way; the rows stay deleted, as wanted.
  - it inserted rows with those keys (absent at V): the pass commits but deletes nothing
    of them, because it only names rows that existed at V; the new rows survive.
  - it touched other rows only: in a fragment the pass also touches, rejected; elsewhere
    the pass commits. Either is harmless: a merge that left our keys alone merged no
    generation mentioning them (keys are disjoint across shards, and a merge covering our
    generations would have deleted or re-put those rows), so deleting them is still what
    the log says.

  A rejected pass re-plans (:func:`run_merge`); a committed one is harmless, and the
  marked pass then decides: a newer merge makes its marker stale.
* ``_guard_progress`` runs right before each commit and still adds one case that neither
  fence catches: a takeover merger with a smaller budget that merged only a *prefix* of
  our generations (recorded progress below our marker, so Lance accepts our marker) and
  re-inserted a key our batch deletes. The bound delete does not see that row (it did not
  exist at V) and the marked upsert would leave it in place. The guard refuses once the
  recorded progress of a shard has moved since planning. What remains is a stall between
  the guard's read and Lance's commit, with such a prefix merger in that instant. Folding
  the deletes into the marked commit (``when_not_matched_by_source_delete``) would not
  close it: Lance rebases a merge_insert over a concurrent insert-only commit without
  re-running its join (observed), so that window merely moves inside Lance, at the price
  of a full-table scan per merge.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Protocol

import lance
import pyarrow as pa
from lance.mem_wal import CompactedSsTable

from memwal.core import steps
from memwal.core.document import Document
from memwal.core.retry import after_conflict, vanished
from memwal.errors import ConflictError, StateMovedError, first_line
from memwal.history import run as history
from memwal.merge import intents
from memwal.merge.changes import NetChanges
from memwal.merge.join import join_builder
from memwal.merge.local import DEFAULT_MEMORY_BUDGET, DEFAULT_PARTITION_ROWS, local_net_changes
from memwal.merge.model import BlockedShard, MergePlan
from memwal.merge.plan import plan_merge
from memwal.table import Table
from memwal.table.generations import GenerationUnreadableError

if TYPE_CHECKING:
    from memwal.lease import Lease

log = logging.getLogger(__name__)

Step = Callable[[str], None]


class MergeEngine(Protocol):
    """Computes the net change set of a plan (local: pyarrow; spark: executors)."""

    name: str

    def net_changes(self, table: Table, plan: MergePlan, schema) -> NetChanges: ...


class LocalEngine:
    name = "local"

    def __init__(
        self, partition_rows: int = DEFAULT_PARTITION_ROWS, memory_budget: int = DEFAULT_MEMORY_BUDGET
    ) -> None:
        self.partition_rows = partition_rows
        self.memory_budget = memory_budget

    def net_changes(self, table: Table, plan: MergePlan, schema) -> NetChanges:
        return local_net_changes(plan, schema, table.storage_options, partition_rows=self.partition_rows,
                                 memory_budget=self.memory_budget)


@dataclass
class ShardMergeResult:
    shard_id: str
    from_generation: int
    to_generation: int
    rows_upserted: int
    rows_deleted: int


@dataclass
class MergeResult(Document):
    table: str
    version: int | None
    shards: list[ShardMergeResult] = field(default_factory=list)
    blocked: list[dict] = field(default_factory=list)
    commits: int = 0
    attempts: int = 1
    engine: str = "local"

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def ok(self) -> bool:
        return not self.blocked


class StaleProgressError(ConflictError):
    """Another merger recorded progress for a shard of this batch first (a lost race)."""


def _markers(plan: MergePlan) -> list[CompactedSsTable]:
    return [CompactedSsTable(s.shard_id, s.to_generation) for s in plan.shards]


def _before_commit(table: Table, plan: MergePlan, lease: Lease | None, step: Step, name: str) -> None:
    """The last checks before a commit: the lease, then progress; then the test hook.

    The hook runs after both checks, so a test that stalls there proves what the commit
    itself does when its author lost the lease (the fence), not what the checks catch.
    """
    if lease:
        lease.check()
    _guard_progress(table, plan)
    step(name)


def bound_delete_pass(table: Table, plan: MergePlan, keys: pa.Table) -> int:
    """Delete the rows of ``keys`` that existed at the plan's read version, committed
    against that version (no marker). Returns the new table version.

    Raises ``CommitConflictError`` when a commit since then touched those rows.
    """
    ds = table.dataset(plan.read_version)
    builder = join_builder(ds, plan.primary_key, keys.num_rows)
    txn, _stats = builder.when_matched_delete().execute_uncommitted(keys)
    txn.transaction_properties = {**(txn.transaction_properties or {}), **history.transaction_properties()}
    done = lance.LanceDataset.commit(
        ds.uri, txn, read_version=plan.read_version, storage_options=table.storage_options or None
    )
    history.committed(done.version)
    return done.version


def marked_pass(table: Table, plan: MergePlan, net: NetChanges) -> int:
    """The pass carrying the progress marker, through ``execute()`` (the uncommitted path
    drops the marker): upserts, or the deletes when the batch has no upsert. Lance
    rejects it when another merger recorded progress at or above ours. Returns the new
    table version."""
    builder = join_builder(table.dataset(), plan.primary_key, net.num_upserts or net.num_deletes)
    if net.num_upserts:
        builder = builder.when_matched_update_all().when_not_matched_insert_all()
        data = net.upsert_data()
    else:
        builder = builder.when_matched_delete()
        data = net.delete_keys
    builder.mark_sstables_as_compacted(_markers(plan)).execute(data)
    version = table.dataset().version
    history.committed(version)
    return version


def commit_net_changes(
    table: Table, plan: MergePlan, net: NetChanges, *, lease: Lease | None, on_step: Step | None = None
) -> tuple[int, int]:
    """The bound delete pass (no marker) then the marked pass. Returns (version, commits)."""
    step = steps.scoped("merge", on_step)
    commits = 0
    # Written before the lease check that precedes our first commit (memwal.merge.intents).
    intent = intents.write_intent(table.store, {s.shard_id: s.to_generation for s in plan.shards},
                                  plan.read_version, lease.holder if lease else "no-lease")
    if net.num_deletes and net.num_upserts:
        _before_commit(table, plan, lease, step, "before-delete-commit")
        bound_delete_pass(table, plan, net.delete_keys)
        commits += 1
        step("after-delete-pass")
    _before_commit(table, plan, lease, step, "before-marked-commit")
    version = marked_pass(table, plan, net)
    commits += 1
    intents.finish(table.store, intent, table.manifest())
    if net.num_upserts:
        step("after-upsert-commit")
    else:
        step("after-delete-pass")
    return version, commits


def _guard_progress(table: Table, plan: MergePlan) -> None:
    """Refuse to commit when another merger moved a shard of this batch since planning.

    Lance rejects a marker only when it is not above the recorded one; a merger that
    merged a prefix of our generations records less, and its re-inserted rows are
    invisible to our bound delete. Reading the latest progress first catches it.
    """
    latest = table.manifest()
    for s in plan.shards:
        now = latest.compacted_generation(s.shard_id)
        if now != s.compacted_generation:
            raise StaleProgressError(
                f"Stale SSTable compaction: shard {s.shard_id} progress moved from "
                f"{s.compacted_generation} to {now} while merging"
            )


def execute_merge(
    table: Table, plan: MergePlan, engine: MergeEngine, *, lease: Lease | None = None, on_step: Step | None = None
) -> MergeResult:
    """Run one planned batch. Raises on conflict; :func:`run_merge` re-plans and retries."""
    step = steps.scoped("merge", on_step)
    result = MergeResult(table=table.uri, version=None, engine=engine.name, blocked=[asdict(b) for b in plan.blocked])
    if plan.is_empty():
        return result
    schema = table.dataset(plan.read_version).schema
    if lease:
        lease.check()
    step("before-read")
    net = engine.net_changes(table, plan, schema)
    try:
        step("after-read")
        version, commits = commit_net_changes(table, plan, net, lease=lease, on_step=on_step)
    finally:
        net.close()
    result.version = version
    result.commits = commits
    result.shards = [
        ShardMergeResult(
            s.shard_id,
            s.from_generation,
            s.to_generation,
            net.rows_upserted.get(s.shard_id, 0),
            net.rows_deleted.get(s.shard_id, 0),
        )
        for s in plan.shards
    ]
    step("before-report")
    return result


def _expired_under_us(table: Table, plan: MergePlan, exc: BaseException) -> bool:
    """Whether Lance failed on a file that a version cleanup removed since we planned:
    "not found", and the table has moved past the plan's read version."""
    return vanished(exc) and table.manifest().version > plan.read_version


def run_merge(
    table: Table,
    *,
    plan: MergePlan | None = None,
    engine: MergeEngine | None = None,
    lease: Lease | None = None,
    shards: list[str] | None = None,
    max_generations: int | None = None,
    max_rows: int | None = None,
    max_bytes: int | None = None,
    max_attempts: int = 6,
    on_step: Step | None = None,
) -> MergeResult:
    """Execute ``plan`` (or a fresh one), re-planning only after a lost race.

    With a lease, it is checked before every re-plan and once more before reporting: a
    conflict is often the work of a merger that took our lease over, and a run that lost
    its lease must end with LeaseLostError (exit 3), even when the re-plan finds nothing
    left to merge, never with a success.
    """
    engine = engine or LocalEngine()
    #: Generations this run failed to read: their shards stop there, the others merge.
    unreadable: dict[str, BlockedShard] = {}

    def attempt(n: int) -> MergeResult:
        if n > 1 and lease:
            lease.check()
        p = plan if n == 1 and plan is not None and not unreadable else replan()
        while True:
            try:
                result = execute_merge(table, p, engine, lease=lease, on_step=on_step)
            except GenerationUnreadableError as exc:
                planned = next((s.compacted_generation for s in p.shards if s.shard_id == exc.shard_id), None)
                if planned is not None and table.manifest().compacted_generation(exc.shard_id) != planned:
                    # Merged (and collected) by another merger since we planned: a lost race.
                    raise StateMovedError(f"{table.uri}: shard {exc.shard_id} was merged meanwhile ({exc})") from exc
                known = unreadable.get(exc.shard_id)
                if known is not None and known.generation <= exc.generation:
                    raise  # the plan already stopped there: not a damaged file we can step around
                log.warning("%s: %s; merging the other shards", table.uri, exc)
                unreadable[exc.shard_id] = BlockedShard(exc.shard_id, exc.generation, exc.detail)
                p = replan()
                continue
            except (OSError, ValueError, RuntimeError) as exc:
                if not _expired_under_us(table, p, exc):
                    raise
                # gc --expire-versions removed the version (or its files) we read or commit
                # against: nothing of this pass was committed (a delete pass that was is
                # harmless to redo: invariant 2), so plan again at the latest version.
                raise StateMovedError(f"{table.uri}: version {p.read_version} expired while merging "
                                      f"({first_line(exc, table.uri)})") from exc
            result.attempts = n
            return result

    def replan() -> MergePlan:
        return plan_merge(table, shards=shards, max_generations=max_generations, max_rows=max_rows,
                          max_bytes=max_bytes, stop_at=unreadable)

    result = after_conflict(attempt, what=f"{table.uri}: merge", attempts=max_attempts)
    if lease:
        lease.check()
    return result
