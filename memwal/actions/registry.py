"""The five maintenance actions, declared once each: options, plan, execute, leases, verdict.

The plan and execute functions are thin: each calls its job's package (``memwal.merge``,
``memwal.catchup``, ``memwal.compact``, ``memwal.snapshot``, ``memwal.gc``), imported when the
job runs so that ``memwal --help`` does not load Lance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memwal.actions.action import Action, lease_set
from memwal.actions.options import (
    CatchupOptions,
    CompactOptions,
    GcOptions,
    MergeOptions,
    SnapshotOptions,
)

if TYPE_CHECKING:
    from memwal.table import Table


# ----------------------------------------------------------------------------- merge


def _plan_merge(table: Table, o: MergeOptions) -> Any:
    from memwal.merge import plan_merge

    return plan_merge(table, **_budget(o))


def _budget(o: MergeOptions) -> dict[str, Any]:
    return dict(shards=list(o.shards) or None, max_generations=o.max_generations, max_rows=o.max_rows,
                max_bytes=o.max_bytes)


def _execute_merge(table: Table, plan: Any, o: MergeOptions, engine: Any, lease: Any) -> Any:
    from memwal.merge import run_merge

    return run_merge(table, plan=plan, engine=engine, lease=lease, **_budget(o))


def _merge_problems(doc: dict) -> list[str]:
    return [f"shard {b['shard_id']} stopped at generation {b['generation']}: {b['reason']}" for b in doc["blocked"]]


# ----------------------------------------------------------------------------- catchup


def _thresholds(o: CatchupOptions) -> Any:
    from memwal.catchup import CatchupThresholds

    t = CatchupThresholds()
    if o.max_deltas is not None:
        t.max_deltas = o.max_deltas
    if o.max_unindexed_fraction is not None:
        t.max_unindexed_fraction = o.max_unindexed_fraction
    return t


def _plan_catchup(table: Table, o: CatchupOptions) -> Any:
    from memwal.catchup import plan_catchup

    return plan_catchup(table, indexes=list(o.indexes) or None, thresholds=_thresholds(o))


def _execute_catchup(table: Table, plan: Any, o: CatchupOptions, engine: Any, lease: Any) -> Any:
    from memwal.catchup import run_catchup

    return run_catchup(table, plan=plan, engine=engine, lease=lease)


# ----------------------------------------------------------------------------- compact


def _compaction(o: CompactOptions) -> dict[str, Any]:
    from memwal.compact import lance_options

    return lance_options(target_rows_per_fragment=o.target_rows_per_fragment, max_rows_per_group=o.max_rows_per_group,
                         materialize_deletions_threshold=o.materialize_deletions_threshold,
                         max_fragments=o.max_fragments)


def _plan_compact(table: Table, o: CompactOptions) -> Any:
    from memwal.compact import plan_compaction

    return plan_compaction(table, _compaction(o))


def _execute_compact(table: Table, plan: Any, o: CompactOptions, engine: Any, lease: Any) -> Any:
    from memwal.compact import run_compact

    catchup_engine = ACTIONS["catchup"].engine(o.engine)  # re-earns what the compaction commit dropped (H4)
    return run_compact(table, plan=plan, options=_compaction(o), engine=engine, lease=lease,
                       catchup_engine=catchup_engine)


# ----------------------------------------------------------------------------- snapshot


def _plan_snapshot(table: Table, o: SnapshotOptions) -> Any:
    from memwal.snapshot import plan_snapshot

    # A dry run reads the manifests in-process: it never starts an engine (a Spark session).
    reader = ACTIONS["snapshot"].engine("local" if o.dry_run else o.engine)
    return plan_snapshot(table, reader=reader)


def _execute_snapshot(table: Table, plan: Any, o: SnapshotOptions, engine: Any, lease: Any) -> Any:
    from memwal.snapshot import execute_snapshot

    return execute_snapshot(table, plan, lease=lease)


# ----------------------------------------------------------------------------- gc


def _plan_gc(table: Table, o: GcOptions) -> Any:
    from memwal.gc import prepare_gc

    # Plans once, before the lease: bad input (a corrupt WAL entry, an audit path that is a
    # file) fails with nothing written. A concurrent GC deleting what we listed is retried
    # inside; the run re-checks the gates against the latest table version right before it
    # deletes, so a plan made before the lease stays safe.
    return prepare_gc(table, audit=o.audit, grace_seconds=o.grace_seconds, orphan_age_seconds=o.orphan_age_seconds,
                      history_retention_seconds=o.history_retention, expire_versions_seconds=o.expire_versions)


def _execute_gc(table: Table, plan: Any, o: GcOptions, engine: Any, lease: Any) -> Any:
    from memwal.gc import run_gc

    return run_gc(table, plan, engine=engine, lease=lease, orphans=o.orphans, audit=o.audit)


def _preview_gc(table: Table, plan: Any) -> Any:
    return plan.preview()


def _gc_problems(doc: dict) -> list[str]:
    from memwal.gc import problems_in

    return problems_in(doc)  # GcResult.problems(), on the document


def _single(kind: str, *, wait: bool = False) -> Callable[..., Any]:
    return lambda table, o, run_id=None: lease_set(table, o, kind, wait_for=(kind,) if wait else (), run_id=run_id)


def _none(doc: dict) -> list[str]:
    return []


# The in-process engines, imported when a job runs (``memwal --help`` must not load Lance).


def _local_merge() -> Any:
    from memwal.merge.execute import LocalEngine

    return LocalEngine()


def _local_catchup() -> Any:
    from memwal.catchup import LocalCatchupEngine

    return LocalCatchupEngine()


def _local_compact() -> Any:
    from memwal.compact import LocalCompactEngine

    return LocalCompactEngine()


def _local_snapshot() -> Any:
    from memwal.snapshot import LocalManifestReader

    return LocalManifestReader()


def _local_gc() -> Any:
    from memwal.gc import LocalGcEngine

    return LocalGcEngine()


#: Every action, in the order a maintenance cycle runs them.
ACTIONS: dict[str, Action] = {
    a.name: a
    for a in (
        Action("merge", "merge flushed generations into the base table, in order, with atomic progress",
               MergeOptions, _plan_merge, _execute_merge,
               _local_merge,
               _single("merge", wait=True), _merge_problems, has_work=lambda plan: not plan.is_empty()),
        Action("catchup", "bring base-table indexes up to the merged generations",
               CatchupOptions, _plan_catchup, _execute_catchup,
               _local_catchup,
               _single("catchup"), _none),
        Action("compact", "rewrite small fragments and materialise deletions, keeping progress and index catch-up",
               CompactOptions, _plan_compact, _execute_compact,
               _local_compact,
               _single("compact"), _none),
        # The refresh replaces the MemWAL index entry, which can erase progress committed
        # concurrently (hazard H1). It also holds the merge lease, so memwal-jobs' own
        # mergers never commit during it; its detect-and-repair covers every other writer.
        Action("snapshot", "publish every shard's state in the MemWAL index (the shard snapshot)",
               SnapshotOptions, _plan_snapshot, _execute_snapshot,
               _local_snapshot,
               lambda table, o, run_id=None: lease_set(table, o, "snapshot", "merge", wait_for=("merge",),
                                                       run_id=run_id), _none),
        Action("gc", "delete merged, indexed, unretained generations and their WAL entries",
               GcOptions, _plan_gc, _execute_gc,
               _local_gc,
               _single("gc"), _gc_problems, _preview_gc),
    )
}
