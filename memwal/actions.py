"""The four maintenance actions behind one call, for the CLI, backfills and Airflow.

``run_action("merge", uri, storage_options, engine="local", dry_run=False, **options)``
opens the table, plans, takes the action's lease, executes, and returns the same JSON
document the CLI prints with ``--json``. Keeping this the one entry point means the CLI,
``memwal backfill`` and the Airflow operators cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memwal.errors import BadInputError
from memwal.table import Table, open_table

ACTIONS = ("merge", "catchup", "snapshot", "gc")

# How long a merge or a snapshot refresh waits for the merge lease before giving up with
# LeaseHeldError (exit 3): long enough to sit out the other's short hold, short enough
# that a stuck holder is reported rather than waited on forever.
MERGE_LEASE_WAIT_SECONDS = 30.0

ActionFn = Callable[..., dict[str, Any]]
_REGISTRY: dict[str, ActionFn] = {}


def action(name: str) -> Callable[[ActionFn], ActionFn]:
    def register(fn: ActionFn) -> ActionFn:
        _REGISTRY[name] = fn
        return fn

    return register


def merge_engine(name: str):
    """The merge engine by name; Spark is imported only when asked for (the core has no Spark)."""
    if name == "spark":
        from jobs.spark_engine import SparkMergeEngine

        return SparkMergeEngine.from_active_or_local()
    if name != "local":
        raise BadInputError(f"unknown engine {name!r}: expected local or spark")
    from memwal.merge.execute import LocalEngine

    return LocalEngine()


@action("merge")
def merge_action(
    table: Table,
    *,
    engine: str = "local",
    dry_run: bool = False,
    shards: list[str] | None = None,
    max_generations: int | None = None,
    max_rows: int | None = None,
    max_bytes: int | None = None,
) -> dict[str, Any]:
    from memwal.lease import Lease
    from memwal.merge import plan_merge, run_merge

    budget = dict(shards=shards or None, max_generations=max_generations, max_rows=max_rows, max_bytes=max_bytes)
    # Plan before taking the lease: bad input (a corrupt manifest, an unknown shard) fails
    # here with nothing written, not even a lease object. The run re-plans under the lease.
    plan = plan_merge(table, **budget)
    if dry_run:
        return {"dry_run": True, **plan.to_json()}
    eng = merge_engine(engine)
    with Lease(table.store, "merge").acquire_waiting(MERGE_LEASE_WAIT_SECONDS) as lease:
        return run_merge(table, engine=eng, lease=lease, **budget).to_json()


@action("catchup")
def catchup_action(
    table: Table,
    *,
    engine: str = "local",
    dry_run: bool = False,
    indexes: list[str] | None = None,
    max_deltas: int | None = None,
    max_unindexed_fraction: float | None = None,
) -> dict[str, Any]:
    from memwal.catchup import CatchupThresholds, plan_catchup, run_catchup
    from memwal.lease import Lease

    thresholds = CatchupThresholds()
    if max_deltas is not None:
        thresholds.max_deltas = max_deltas
    if max_unindexed_fraction is not None:
        thresholds.max_unindexed_fraction = max_unindexed_fraction
    plan = plan_catchup(table, indexes=indexes, thresholds=thresholds)
    if dry_run:
        return {"dry_run": True, **plan.to_json()}
    with Lease(table.store, "catchup") as lease:
        return run_catchup(table, engine=catchup_engine(engine), lease=lease, indexes=indexes,
                           thresholds=thresholds).to_json()


def catchup_engine(name: str):
    if name == "spark":
        from jobs.spark_catchup import SparkCatchupEngine

        return SparkCatchupEngine.from_active_or_local()
    if name != "local":
        raise BadInputError(f"unknown engine {name!r}: expected local or spark")
    from memwal.catchup import LocalCatchupEngine

    return LocalCatchupEngine()


@action("gc")
def gc_action(
    table: Table,
    *,
    engine: str = "local",
    dry_run: bool = False,
    grace_seconds: float | None = None,
    expire_versions: float | None = None,
    orphans: bool = False,
    orphan_age_seconds: float | None = None,
    audit: bool = False,
) -> dict[str, Any]:
    from memwal.gc import DEFAULT_GRACE_SECONDS, DEFAULT_ORPHAN_AGE_SECONDS, plan_gc, run_gc
    from memwal.lease import Lease

    options = dict(
        grace_seconds=DEFAULT_GRACE_SECONDS if grace_seconds is None else grace_seconds,
        orphan_age_seconds=DEFAULT_ORPHAN_AGE_SECONDS if orphan_age_seconds is None else orphan_age_seconds,
    )
    plan_gc(table, **options)  # validate (and fail on bad input) before writing anything
    if dry_run:
        return run_gc(table, dry_run=True, **options).to_json()
    with Lease(table.store, "gc") as lease:
        return run_gc(table, engine=gc_engine(engine), lease=lease, expire_versions_seconds=expire_versions,
                      orphans=orphans, audit=audit, **options).to_json()


def gc_engine(name: str):
    if name == "spark":
        from jobs.spark_gc import SparkGcEngine

        return SparkGcEngine.from_active_or_local()
    if name != "local":
        raise BadInputError(f"unknown engine {name!r}: expected local or spark")
    from memwal.gc import LocalGcEngine

    return LocalGcEngine()


def run_action(
    name: str,
    table: str | Table,
    storage_options: dict[str, str] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Run one action on one table and return its JSON result document."""
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY))
        raise BadInputError(f"unknown job {name!r}: expected one of {known}")
    t = table if isinstance(table, Table) else open_table(table, storage_options)
    return _REGISTRY[name](t, **options)


def snapshot_reader(name: str):
    """The manifest reader of the snapshot refresh by engine name (Spark imported only when asked for)."""
    if name == "spark":
        from jobs.spark_snapshot import SparkManifestReader

        return SparkManifestReader.from_active_or_local()
    if name != "local":
        raise BadInputError(f"unknown engine {name!r}: expected local or spark")
    from memwal.snapshot import LocalManifestReader

    return LocalManifestReader()


@action("snapshot")
def snapshot_action(table: Table, *, engine: str = "local", dry_run: bool = False) -> dict[str, Any]:
    from memwal.lease import Lease
    from memwal.snapshot import execute_snapshot, plan_snapshot

    # Plan before the lease: bad input (a corrupt shard manifest) fails with nothing written.
    plan = plan_snapshot(table, reader=snapshot_reader(engine))
    if dry_run:
        return {"dry_run": True, **plan.to_json()}
    # The refresh replaces the MemWAL index entry, which can erase progress committed
    # concurrently (hazard H1). It also holds the merge lease, so memwal-jobs' own mergers
    # never commit during a refresh; its detect-and-repair covers every other writer.
    with Lease(table.store, "snapshot") as lease:
        with Lease(table.store, "merge").acquire_waiting(MERGE_LEASE_WAIT_SECONDS):
            return execute_snapshot(table, plan, lease=lease).to_json()
