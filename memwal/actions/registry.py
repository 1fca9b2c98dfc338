"""The five maintenance actions, declared once each: options, plan, execute, leases, verdict.

Each is an ``Action[Options, Plan, Result, Engine]`` of its job's own types. The plan and
execute functions are thin: each calls its job's package (``memwal.merge``,
``memwal.catchup``, ``memwal.compact``, ``memwal.snapshot``, ``memwal.gc``), imported when
the job runs so that ``memwal --help`` does not load Lance.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memwal.actions.action import Action, HeldLeases, Leases, lease_set
from memwal.actions.options import (
    CatchupOptions,
    CompactOptions,
    GcOptions,
    JobOptions,
    MergeOptions,
    SnapshotOptions,
)

if TYPE_CHECKING:
    import contextlib

    from lance.optimize import CompactionOptions

    from memwal.catchup import CatchupPlan, CatchupResult, CatchupThresholds
    from memwal.catchup.engine import CatchupEngine
    from memwal.compact import CompactPlan, CompactResult
    from memwal.compact.engine import CompactEngine
    from memwal.core.document import Document
    from memwal.gc import GcPlan, GcResult
    from memwal.gc.engine import GcEngine
    from memwal.lease import Lease
    from memwal.merge import MergePlan, MergeResult
    from memwal.merge.engine import MergeEngine
    from memwal.snapshot import SnapshotPlan, SnapshotResult
    from memwal.snapshot.engine import SnapshotEngine
    from memwal.table import Table


# ----------------------------------------------------------------------------- merge


def plan_merge(table: Table, o: MergeOptions, *, check_keys: bool = True) -> MergePlan:
    from memwal.merge import plan_merge

    return plan_merge(table, shards=list(o.shards) or None, max_generations=o.max_generations,
                      max_rows=o.max_rows, max_bytes=o.max_bytes, check_keys=check_keys)


def execute_merge(table: Table, plan: MergePlan, o: MergeOptions, engine: MergeEngine, lease: Lease) -> MergeResult:
    from memwal.merge import run_merge

    return run_merge(table, plan=plan, engine=engine, lease=lease, shards=list(o.shards) or None,
                     max_generations=o.max_generations, max_rows=o.max_rows, max_bytes=o.max_bytes)


def merge_document_problems(doc: Mapping[str, Any]) -> list[str]:
    from memwal.merge.model import problems_in

    return problems_in(doc)  # MergeResult.problems() / MergePlan.problems(), on the document


# ----------------------------------------------------------------------------- catchup


def _thresholds(o: CatchupOptions) -> CatchupThresholds:
    from memwal.catchup import CatchupThresholds

    t = CatchupThresholds()
    if o.max_deltas is not None:
        t.max_deltas = o.max_deltas
    if o.max_unindexed_fraction is not None:
        t.max_unindexed_fraction = o.max_unindexed_fraction
    return t


def plan_catchup(table: Table, o: CatchupOptions) -> CatchupPlan:
    from memwal.catchup import plan_catchup

    return plan_catchup(table, indexes=list(o.indexes) or None, thresholds=_thresholds(o))


def execute_catchup(table: Table, plan: CatchupPlan, o: CatchupOptions, engine: CatchupEngine,
                    lease: Lease) -> CatchupResult:
    from memwal.catchup import run_catchup

    return run_catchup(table, plan=plan, engine=engine, lease=lease)


# ----------------------------------------------------------------------------- compact


def _compaction(o: CompactOptions) -> CompactionOptions:
    from memwal.compact import lance_options

    return lance_options(target_rows_per_fragment=o.target_rows_per_fragment, max_rows_per_group=o.max_rows_per_group,
                         materialize_deletions_threshold=o.materialize_deletions_threshold,
                         max_fragments=o.max_fragments)


def plan_compact(table: Table, o: CompactOptions) -> CompactPlan:
    from memwal.compact import plan_compaction

    return plan_compaction(table, _compaction(o))


def execute_compact(table: Table, plan: CompactPlan, o: CompactOptions, engine: CompactEngine,
                    lease: Lease) -> CompactResult:
    from memwal.compact import run_compact

    catchup_engine = CATCHUP.engine(o.engine)  # re-earns what the compaction commit dropped (H4)
    return run_compact(table, plan=plan, options=_compaction(o), engine=engine, lease=lease,
                       catchup_engine=catchup_engine)


# ----------------------------------------------------------------------------- snapshot


def plan_snapshot(table: Table, o: SnapshotOptions) -> SnapshotPlan:
    from memwal.snapshot import plan_snapshot

    # A dry run reads the manifests in-process: it never starts an engine (a Spark session).
    reader = SNAPSHOT.engine("local" if o.dry_run else o.engine)
    return plan_snapshot(table, reader=reader)


def execute_snapshot(table: Table, plan: SnapshotPlan, o: SnapshotOptions, engine: SnapshotEngine,
                     lease: Lease) -> SnapshotResult:
    from memwal.snapshot import execute_snapshot

    return execute_snapshot(table, plan, lease=lease)


# ----------------------------------------------------------------------------- gc


def plan_gc(table: Table, o: GcOptions) -> GcPlan:
    from memwal.gc import prepare_gc

    # Plans once, before the lease: bad input (a corrupt WAL entry, an audit path that is a
    # file) fails with nothing written. A concurrent GC deleting what we listed is retried
    # inside; the run re-checks the gates against the latest table version right before it
    # deletes, so a plan made before the lease stays safe.
    return prepare_gc(table, audit=o.audit, grace_seconds=o.grace_seconds, orphan_age_seconds=o.orphan_age_seconds,
                      history_retention_seconds=o.history_retention, expire_versions_seconds=o.expire_versions,
                      writer_idle_seconds=o.writer_idle_seconds, listed_only=o.listed_only)


def execute_gc(table: Table, plan: GcPlan, o: GcOptions, engine: GcEngine, lease: Lease) -> GcResult:
    from memwal.gc import run_gc

    return run_gc(table, plan, engine=engine, lease=lease, orphans=o.orphans, audit=o.audit)


def preview_gc(table: Table, plan: GcPlan) -> Document:
    return plan.preview()


def gc_plan_problems(plan: GcPlan) -> list[str]:
    from memwal.gc.result import problems_of

    return problems_of(plan.broken_shards, plan.blocked)  # GcResult.problems() of its preview


def gc_document_problems(doc: Mapping[str, Any]) -> list[str]:
    from memwal.gc import problems_in

    return problems_in(doc)  # GcResult.problems(), on the document


# ----------------------------------------------------------------------------- leases


def _single(kind: str, *, wait: bool = False) -> Leases:
    def take(table: Table, options: JobOptions, *,
             run_id: str | None = None) -> contextlib.AbstractContextManager[HeldLeases]:
        return lease_set(table, options, kind, wait_for=(kind,) if wait else (), run_id=run_id)

    return take


def _snapshot_leases(table: Table, options: JobOptions, *,
                     run_id: str | None = None) -> contextlib.AbstractContextManager[HeldLeases]:
    # The refresh replaces the MemWAL index entry, which can erase progress committed
    # concurrently (hazard H1). It also holds the merge lease, so memwal-jobs' own
    # mergers never commit during it; its detect-and-repair covers every other writer.
    return lease_set(table, options, "snapshot", "merge", wait_for=("merge",), run_id=run_id)


# The in-process engines, imported when a job runs (``memwal --help`` must not load Lance).


def _local_merge() -> MergeEngine:
    from memwal.merge.engine import LocalMergeEngine

    return LocalMergeEngine()


def _local_catchup() -> CatchupEngine:
    from memwal.catchup.engine import LocalCatchupEngine

    return LocalCatchupEngine()


def _local_compact() -> CompactEngine:
    from memwal.compact.engine import LocalCompactEngine

    return LocalCompactEngine()


def _local_snapshot() -> SnapshotEngine:
    from memwal.snapshot.engine import LocalSnapshotEngine

    return LocalSnapshotEngine()


def _local_gc() -> GcEngine:
    from memwal.gc.engine import LocalGcEngine

    return LocalGcEngine()


def _merge_has_work(plan: MergePlan) -> bool:
    return not plan.is_empty()


def _merge_plan_problems(plan: MergePlan) -> list[str]:
    return plan.problems()


MERGE: Action[MergeOptions, MergePlan, MergeResult, MergeEngine] = Action(
    "merge", "merge flushed generations into the base table, in order, with atomic progress",
    MergeOptions, plan_merge, execute_merge, _local_merge, _single("merge", wait=True),
    document_problems=merge_document_problems, plan_problems=_merge_plan_problems, has_work=_merge_has_work)
CATCHUP: Action[CatchupOptions, CatchupPlan, CatchupResult, CatchupEngine] = Action(
    "catchup", "bring base-table indexes up to the merged generations",
    CatchupOptions, plan_catchup, execute_catchup, _local_catchup, _single("catchup"))
COMPACT: Action[CompactOptions, CompactPlan, CompactResult, CompactEngine] = Action(
    "compact", "rewrite small fragments and materialise deletions, keeping progress and index catch-up",
    CompactOptions, plan_compact, execute_compact, _local_compact, _single("compact"))
def _snapshot_plan_problems(plan: SnapshotPlan) -> list[str]:
    return plan.problems()


def snapshot_document_problems(doc: Mapping[str, Any]) -> list[str]:
    """SnapshotPlan.problems() on its document (a result's document has no unsafe generations)."""
    from memwal.snapshot.plan import UnsafeGeneration, unsafe_problems

    return unsafe_problems(UnsafeGeneration(u["shard_id"], u["generation"], u["detail"], u["reason"])
                           for u in doc.get("unsafe_generations", ()))


SNAPSHOT: Action[SnapshotOptions, SnapshotPlan, SnapshotResult, SnapshotEngine] = Action(
    "snapshot", "publish every shard's state in the MemWAL index (the shard snapshot)",
    SnapshotOptions, plan_snapshot, execute_snapshot, _local_snapshot, _snapshot_leases,
    document_problems=snapshot_document_problems, plan_problems=_snapshot_plan_problems)
GC: Action[GcOptions, GcPlan, GcResult, GcEngine] = Action(
    "gc", "delete merged, indexed, unretained generations and their WAL entries",
    GcOptions, plan_gc, execute_gc, _local_gc, _single("gc"),
    document_problems=gc_document_problems, plan_problems=gc_plan_problems, preview=preview_gc)

#: Every action, in the order a maintenance cycle runs them: the snapshot last, so that what it
#: publishes is every shard manifest as GC's drains left it (docs/decisions/0025-drain-protocol.md).
ACTIONS: dict[str, Action[Any, Any, Any, Any]] = {a.name: a for a in (MERGE, CATCHUP, COMPACT, GC, SNAPSHOT)}
