"""Execute a merge plan: the batch's data, then its progress marker, by one of three paths.

The path is chosen per batch (:func:`commit_path`), logged, and reported (``commit_path``):
* ``driverless`` (last write wins, an engine that writes the base table itself, e.g. Spark):
  executors write rows and deletion files, the driver commits metadata only
  (:mod:`memwal.merge.driverless`: a data commit, then the marker alone).
* ``driver`` (merge operators, the local engine, or an unfinished driver-path merge on these
  shards): pass 1 deletes the keys whose newest version is a tombstone, unmarked; pass 2 upserts
  every other key with ``mark_sstables_as_compacted`` through ``execute()`` (the uncommitted
  path drops the marker, H2); deletes only: the marked pass alone. A crash between passes leaves
  progress untouched, and the rerun converges (idempotent deletes, disjoint upserts: invariant 2).
* ``marker``: every generation's data is already in the base (:mod:`memwal.merge.applied`).

Fences (a lease check is not one, H5; the last checks before each commit: :mod:`memwal.merge.guard`):

* Lance rejects a marker not above the recorded generation ("Stale SSTable compaction").
* The unmarked delete pass is built with ``execute_uncommitted()`` at the plan's read version V
  and committed with ``read_version=V``, so Lance resolves it against what was committed since.
  Observed (pylance 14.0.2) when another merge committed after V: rejected (retryable) if that
  merge touched the rows or fragments the pass deletes from; keys it inserted are not deleted;
  other fragments only: committed, harmlessly (keys are disjoint across shards).
* A driver-path or marker-only batch racing an unfinished driverless merge names the fence
  fragment first (:func:`memwal.merge.driverless.claim_fence`), so that merge's data commit
  can no longer land over ours.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import lance
import pyarrow as pa

from memwal.core import steps
from memwal.core.document import Document, as_document
from memwal.core.retry import after_conflict, is_conflict, vanished
from memwal.errors import LeaseLostError, StateMovedError, first_line
from memwal.history import run as history
from memwal.merge import intents
from memwal.merge.batches import split_plan
from memwal.merge.changes import NetChanges, no_changes
from memwal.merge.driverless import claim_fence, commit_table_changes, fence_fragment, with_fence
from memwal.merge.engine import LocalMergeEngine, MergeEngine, max_decoded_bytes, writes_table
from memwal.merge.guard import StaleProgressError as StaleProgressError  # re-exported: callers catch it here
from memwal.merge.guard import applied_ranges, before_commit, earlier, markers
from memwal.merge.join import join_builder
from memwal.merge.model import BlockedShard, MergePlan, blocked_problems
from memwal.merge.ops import MergeOps
from memwal.merge.plan import plan_merge
from memwal.observe import progress
from memwal.table import Table
from memwal.table.generations import GenerationUnreadableError

if TYPE_CHECKING:
    from memwal.lease import Lease

log = logging.getLogger(__name__)

Step = Callable[[str], None]

#: The commit paths of a batch (see the module docstring).
DRIVERLESS, DRIVER, MARKER = "driverless", "driver", "marker"


@dataclass(frozen=True)
class ShardMergeResult:
    shard_id: str
    from_generation: int
    to_generation: int
    rows_upserted: int
    rows_deleted: int


@dataclass(frozen=True)
class MergeResult(Document):
    """What a merge did (``memwal merge --json``).

    Attributes:
        table: The table's URI.
        version: The new table version, or None when nothing was merged.
        shards: Per shard: the generations merged (``from_generation``..``to_generation``), the
            rows upserted and deleted.
        blocked: Shards it stopped at, each with why (what makes the run a failure).
        commits: Table commits made (the data, then the progress marker, or both in one).
        attempts: Plans made: a commit conflict re-plans and retries.
        engine: ``"local"`` or ``"spark"``.
        commit_path: How the batch committed: ``"driverless"``, ``"driver"`` or ``"marker"``; None
            when nothing was.
    """

    table: str
    version: int | None
    shards: tuple[ShardMergeResult, ...] = ()
    blocked: tuple[BlockedShard, ...] = ()
    commits: int = 0
    attempts: int = 1
    engine: str = "local"
    #: How the batch committed: ``driverless``, ``driver`` or ``marker``; None when nothing was.
    commit_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return as_document(self)

    @property
    def ok(self) -> bool:
        return not self.blocked

    def problems(self) -> list[str]:
        """What makes this run a failure: one line per shard it stopped (`blocked_problems`)."""
        return blocked_problems(self.blocked)


def bound_delete_pass(table: Table, plan: MergePlan, keys: pa.Table, *, fence: bool = False) -> int:
    """Delete the rows of ``keys`` that existed at the plan's read version, committed
    against that version (no marker); with ``fence``, naming the fence fragment too
    (:func:`memwal.merge.driverless.with_fence`). Returns the new table version.

    Raises ``CommitConflictError`` when a commit since then touched those rows.
    """
    ds = table.dataset(plan.read_version)
    builder = join_builder(ds, list(plan.primary_key), keys.num_rows)
    txn, _stats = builder.when_matched_delete().execute_uncommitted(keys)
    if fence:
        op = txn.operation
        assert isinstance(op, lance.LanceOperation.Update), type(op)  # what a delete-only merge_insert makes
        op.updated_fragments = with_fence(ds, list(op.updated_fragments), list(op.removed_fragment_ids))
    txn.transaction_properties = {**(txn.transaction_properties or {}), **history.transaction_properties()}
    done = lance.LanceDataset.commit(
        ds.uri, txn, read_version=plan.read_version, storage_options=table.storage_options or None
    )
    history.committed(table, done.version)
    return done.version


def marked_pass(table: Table, plan: MergePlan, net: NetChanges, *, bound: int | None = None,
                data: tuple[int, ...] = ()) -> int:
    """The pass carrying the progress marker, through ``execute()`` (the uncommitted path
    drops the marker): upserts, or the deletes when the batch has no upsert (none at all:
    the marker alone). Lance rejects it when another merger recorded progress at or above
    ours, and, since it is bound to the plan's read version (``bound``: the version right after
    this batch's own earlier commit, when nothing came between) with no retries of its own,
    when a commit since then touched its rows (observed, pylance 14.0.2: updates and inserts
    of the same keys). Otherwise Lance would apply it again over whatever another compactor
    committed meanwhile, older rows over newer ones (issue 54). Its receipt names the generations
    it applied, with ``data``, the batch's earlier commits. Returns the new table version."""
    builder = join_builder(table.dataset(plan.read_version if bound is None else bound), list(plan.primary_key),
                           net.num_upserts or net.num_deletes).conflict_retries(0)
    if net.num_upserts:
        builder = builder.when_matched_update_all().when_not_matched_insert_all()
        rows = net.upsert_data()
    else:
        builder = builder.when_matched_delete()
        rows = net.delete_keys
    builder.mark_sstables_as_compacted(markers(plan)).execute(rows)
    version = int(table.dataset().version)
    history.committed(table, version, applied=applied_ranges(plan, table), data=earlier(plan, data))
    return version


def commit_net_changes(
    table: Table, plan: MergePlan, net: NetChanges, *, lease: Lease | None, on_step: Step | None = None
) -> tuple[int, int]:
    """The driver path: the bound delete pass (no marker), then the marked pass. When an
    unfinished driverless merge may race this batch, its first commit names the fence fragment:
    the delete pass, or a claim of its own before the marked pass. Returns (version, commits)."""
    step = progress.phased("merge", steps.scoped("merge", on_step))
    commits = 0
    # Written before the lease check that precedes our first commit (memwal.merge.intents).
    intent = intents.write_intent(table.store, {s.shard_id: s.to_generation for s in plan.shards},
                                  plan.read_version, lease.holder if lease else "no-lease")
    found = {c.intent for c in plan.applied}
    racing = [i for i in intents.others_pending(table.store, intent, table.manifest(), set(plan.shard_ids))
              if i.commit_path == intents.DRIVERLESS and i.id not in found]
    bound = plan.read_version  # the marked pass conflicts with what others committed since
    ours: tuple[int, ...] = ()
    try:
        if net.num_deletes and net.num_upserts:
            before_commit(table, plan, lease, step, "before-delete-commit")
            done = bound_delete_pass(table, plan, net.delete_keys, fence=bool(racing))
            bound, ours = (done if done == bound + 1 else bound), (done,)
            commits += 1
            step("after-delete-pass")
        elif racing:
            before_commit(table, plan, lease, step, "before-fence-commit")
            claimed = claim_fence(table, plan)
            if claimed is not None:
                bound = claimed if claimed == bound + 1 else bound
                commits += 1
        before_commit(table, plan, lease, step, "before-marked-commit")
        version = marked_pass(table, plan, net, bound=bound, data=ours)
    except BaseException as exc:
        if commits == 0 and (is_conflict(exc) or isinstance(exc, LeaseLostError)):
            # refused or stopped before anything of ours landed: no later plan needs to cover it
            intents.withdraw(table.store, intent)
        raise
    commits += 1
    intents.finish(table.store, intent, table.manifest())
    if net.num_upserts:
        step("after-upsert-commit")
    else:
        step("after-delete-pass")
    return version, commits


def commit_path(table: Table, plan: MergePlan, engine: MergeEngine) -> str:
    """How this batch commits (the module docstring): driverless only for last write wins, on
    an engine that writes the table, on a table with a fence fragment, and with no unfinished
    driver-path merge on its shards (its marked pass could land between our two commits)."""
    if plan.data_plan().is_empty():
        return MARKER
    if not writes_table(engine) or MergeOps(plan.merge_ops).active:
        return DRIVER
    if fence_fragment(table.dataset(plan.read_version)) is None:
        return DRIVER
    pending = intents.others_pending(table.store, "", table.manifest(), set(plan.shard_ids))
    return DRIVER if any(i.commit_path == intents.DRIVER for i in pending) else DRIVERLESS


def execute_merge(
    table: Table, plan: MergePlan, engine: MergeEngine, *, lease: Lease | None = None, on_step: Step | None = None
) -> MergeResult:
    """Run one planned batch. Raises on conflict; :func:`run_merge` re-plans and retries."""
    step = progress.phased("merge", steps.scoped("merge", on_step))
    result = MergeResult(table=table.uri, version=None, engine=engine.name, blocked=plan.blocked)
    if plan.is_empty():
        return result
    schema = table.dataset(plan.read_version).schema
    path = commit_path(table, plan, engine)
    log.info("merge %s: %d shards at version %d commit %s", table.uri, len(plan.shards), plan.read_version, path)
    if lease:
        lease.check(safe_to_stop=True)  # nothing read or written yet: a cancel stops here
    step("before-read")
    data = plan.data_plan()
    if path == DRIVERLESS and writes_table(engine):
        changes = engine.table_changes(table, data, schema)
        try:
            step("after-read")
            if lease:
                lease.check(safe_to_stop=True)  # read, nothing committed: a cancel stops here (the files removed)
            version, commits = commit_table_changes(table, plan, changes, lease=lease, on_step=on_step)
        finally:
            changes.close(table)
        upserted, deleted = changes.rows_upserted, changes.rows_deleted
    else:
        net = no_changes(schema, list(plan.primary_key)) if path == MARKER else engine.net_changes(table, data, schema)
        try:
            step("after-read")
            if lease:
                lease.check(safe_to_stop=True)  # read, nothing committed: a cancel stops here
            version, commits = commit_net_changes(table, plan, net, lease=lease, on_step=on_step)
        finally:
            net.close()
        upserted, deleted = net.rows_upserted, net.rows_deleted
    shards = tuple(ShardMergeResult(s.shard_id, s.from_generation, s.to_generation, upserted.get(s.shard_id, 0),
                                    deleted.get(s.shard_id, 0)) for s in plan.shards)
    step("before-report")
    return replace(result, version=version, commits=commits, commit_path=path, shards=shards)


def _combined(table: Table, engine: MergeEngine, done: list[MergeResult],
              blocked: tuple[BlockedShard, ...]) -> MergeResult:
    """One result for a run's committed batches (:mod:`memwal.merge.batches`): per shard, the
    generations from the first batch's to the last's and the rows of all; the commits of all; the
    last batch's version and path; ``blocked`` from the last plan."""
    if not done:
        return MergeResult(table=table.uri, version=None, engine=engine.name, blocked=blocked)
    shards: dict[str, ShardMergeResult] = {}
    for result in done:
        for s in result.shards:
            seen = shards.get(s.shard_id)
            shards[s.shard_id] = s if seen is None else replace(
                seen, to_generation=s.to_generation, rows_upserted=seen.rows_upserted + s.rows_upserted,
                rows_deleted=seen.rows_deleted + s.rows_deleted)
    last = done[-1]
    return replace(last, shards=tuple(shards.values()), blocked=blocked, commits=sum(r.commits for r in done))


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
    engine = engine or LocalMergeEngine()
    bound = max_decoded_bytes(engine)
    #: Generations this run failed to read: their shards stop there, the others merge.
    unreadable: dict[str, BlockedShard] = {}
    #: What each committed batch did, across re-plans (a conflict in a later batch keeps the earlier ones).
    done: list[MergeResult] = []

    def attempt(n: int) -> MergeResult:
        if n > 1 and lease:
            lease.check(safe_to_stop=True)
        p = plan if n == 1 and plan is not None and not unreadable else replan()
        while True:
            current = p
            try:
                batches = split_plan(table, p, bound)
                if len(batches) > 1:
                    log.info("merge %s: %d generations in %d commits of at most %d MiB decoded", table.uri,
                             len(p.generations), len(batches), (bound or 0) >> 20)
                version = p.read_version
                for i, batch in enumerate(batches):
                    current = batch if i == 0 else replace(batch, read_version=version)
                    result = execute_merge(table, current, engine, lease=lease, on_step=on_step)
                    if result.version is not None:
                        done.append(result)
                        version = result.version
            except GenerationUnreadableError as exc:
                planned = next((s.compacted_generation for s in current.shards if s.shard_id == exc.shard_id), None)
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
                if not _expired_under_us(table, current, exc):
                    raise
                # gc --expire-versions removed the version (or its files) we read or commit
                # against: nothing of this pass was committed (a delete pass that was is
                # harmless to redo: invariant 2), so plan again at the latest version.
                raise StateMovedError(f"{table.uri}: version {current.read_version} expired while merging "
                                      f"({first_line(exc, table.uri)})") from exc
            return replace(_combined(table, engine, done, p.blocked), attempts=n)

    def replan() -> MergePlan:
        return plan_merge(table, shards=shards, max_generations=max_generations, max_rows=max_rows,
                          max_bytes=max_bytes, stop_at=unreadable)

    result = after_conflict(attempt, what=f"{table.uri}: merge", attempts=max_attempts)
    if lease:
        lease.check()
    return result
