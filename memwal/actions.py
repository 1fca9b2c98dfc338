"""The four maintenance actions behind one call, for the CLI, backfills and Airflow.

``run_action("merge", uri, storage_options, engine="local", dry_run=False, **options)``
opens the table, plans, takes the action's lease, executes, and returns the same JSON
document the CLI prints with ``--json``. Keeping this the one entry point means the CLI,
``memwal backfill`` and the Airflow operators cannot drift apart.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from memwal import validate
from memwal.errors import BadInputError
from memwal.lease import DEFAULT_TTL_SECONDS
from memwal.table import Table, open_table

ACTIONS = ("merge", "catchup", "compact", "snapshot", "gc")

# How long a merge or a snapshot refresh waits for the merge lease before giving up with
# LeaseHeldError (exit 3): long enough to sit out the other's short hold, short enough
# that a stuck holder is reported rather than waited on forever.
MERGE_LEASE_WAIT_SECONDS = 30.0

# Each action's engines: (module, class) for "local" and "spark". Spark classes are built
# with ``from_active_or_local()`` (the session spark-submit made, or a local one), and
# their modules load only when asked for: the core imports no Spark.
ENGINES: dict[str, dict[str, tuple[str, str]]] = {
    "merge": {"local": ("memwal.merge.execute", "LocalEngine"), "spark": ("jobs.spark_engine", "SparkMergeEngine")},
    "catchup": {
        "local": ("memwal.catchup", "LocalCatchupEngine"),
        "spark": ("jobs.spark_catchup", "SparkCatchupEngine"),
    },
    "gc": {"local": ("memwal.gc", "LocalGcEngine"), "spark": ("jobs.spark_gc", "SparkGcEngine")},
    "compact": {
        "local": ("memwal.compact", "LocalCompactEngine"),
        "spark": ("jobs.spark_compact", "SparkCompactEngine"),
    },
    "snapshot": {
        "local": ("memwal.snapshot", "LocalManifestReader"),
        "spark": ("jobs.spark_snapshot", "SparkManifestReader"),
    },
}

# Lease TTL of every action unless ``lease_ttl=`` says otherwise (the CLI's --lease-ttl).
DEFAULT_LEASE_TTL = DEFAULT_TTL_SECONDS

ActionFn = Callable[..., dict[str, Any]]
_REGISTRY: dict[str, ActionFn] = {}


def engine_for(action_name: str, engine: str):
    """The engine object of an action by engine name (``local`` or ``spark``)."""
    choices = ENGINES[action_name]
    if engine not in choices:
        raise BadInputError(f"unknown engine {engine!r}: expected {' or '.join(choices)}")
    module, cls = choices[engine]
    factory = getattr(importlib.import_module(module), cls)
    return factory.from_active_or_local() if engine == "spark" else factory()


def leases(table: Table, lease_ttl: float, *kinds: str) -> Any:
    """The leases an action will take, each checked before any is taken.

    A corrupt lease object or a folder in a lease's place fails the action here
    (BadInputError, exit 2) with nothing written, not even the first of its leases.
    """
    from memwal.lease import Lease

    out = [Lease(table.store, kind, ttl_seconds=lease_ttl) for kind in kinds]
    for lease in out:
        lease.inspect()
    return out[0] if len(out) == 1 else out


def action(name: str) -> Callable[[ActionFn], ActionFn]:
    def register(fn: ActionFn) -> ActionFn:
        _REGISTRY[name] = fn
        return fn

    return register


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
    lease_ttl: float = DEFAULT_LEASE_TTL,
) -> dict[str, Any]:
    from memwal.merge import plan_merge, run_merge

    budget = dict(shards=shards or None, max_generations=max_generations, max_rows=max_rows, max_bytes=max_bytes)
    # Plan before taking the lease: bad input (a corrupt manifest, an unknown shard) fails
    # here with nothing written, not even a lease object. The run re-plans under the lease.
    plan = plan_merge(table, **budget)
    if dry_run:
        return {"dry_run": True, **plan.to_json()}
    eng = engine_for("merge", engine)
    with leases(table, lease_ttl, "merge").acquire_waiting(MERGE_LEASE_WAIT_SECONDS) as lease:
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
    lease_ttl: float = DEFAULT_LEASE_TTL,
) -> dict[str, Any]:
    from memwal.catchup import CatchupThresholds, plan_catchup, run_catchup

    thresholds = CatchupThresholds()
    if max_deltas is not None:
        thresholds.max_deltas = max_deltas
    if max_unindexed_fraction is not None:
        thresholds.max_unindexed_fraction = max_unindexed_fraction
    plan = plan_catchup(table, indexes=indexes, thresholds=thresholds)
    if dry_run:
        return {"dry_run": True, **plan.to_json()}
    with leases(table, lease_ttl, "catchup") as lease:
        return run_catchup(table, engine=engine_for("catchup", engine), lease=lease, indexes=indexes,
                           thresholds=thresholds).to_json()


@action("compact")
def compact_action(
    table: Table,
    *,
    engine: str = "local",
    dry_run: bool = False,
    target_rows_per_fragment: int | None = None,
    max_rows_per_group: int | None = None,
    materialize_deletions_threshold: float | None = None,
    max_fragments: int | None = None,
    lease_ttl: float = DEFAULT_LEASE_TTL,
) -> dict[str, Any]:
    from memwal.compact import CompactOptions, plan_compaction, run_compact

    options = CompactOptions(target_rows_per_fragment, max_rows_per_group, materialize_deletions_threshold,
                             max_fragments)
    # Plan before the lease: bad input fails here with nothing written, not even a lease object.
    plan = plan_compaction(table, options)
    if dry_run:
        return {"dry_run": True, **plan.to_json()}
    engines = dict(engine=engine_for("compact", engine), catchup_engine=engine_for("catchup", engine))
    with leases(table, lease_ttl, "compact") as lease:
        return run_compact(table, options=options, lease=lease, **engines).to_json()


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
    lease_ttl: float = DEFAULT_LEASE_TTL,
) -> dict[str, Any]:
    from memwal.gc import DEFAULT_GRACE_SECONDS, DEFAULT_ORPHAN_AGE_SECONDS, prepare_gc, run_gc

    options = dict(
        grace_seconds=DEFAULT_GRACE_SECONDS if grace_seconds is None else grace_seconds,
        orphan_age_seconds=DEFAULT_ORPHAN_AGE_SECONDS if orphan_age_seconds is None else orphan_age_seconds,
    )
    if dry_run:
        return run_gc(table, dry_run=True, **options).to_json()
    # Plan once, before the lease: bad input (a corrupt WAL entry, an audit path that is a
    # file) fails with nothing written, not even a lease object. A concurrent GC deleting
    # what we listed is retried inside; run_gc re-checks the gates against the latest
    # table version right before it deletes, so a plan made before the lease stays safe.
    plan = prepare_gc(table, audit=audit, **options)
    with leases(table, lease_ttl, "gc") as lease:
        return run_gc(table, engine=engine_for("gc", engine), lease=lease, expire_versions_seconds=expire_versions,
                      orphans=orphans, audit=audit, plan=plan, **options).to_json()


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
    # Validate every option before opening the table: bad input must leave nothing written.
    options = validate.action_options(options)
    t = table if isinstance(table, Table) else open_table(table, storage_options)
    return _REGISTRY[name](t, **options)


@action("snapshot")
def snapshot_action(
    table: Table, *, engine: str = "local", dry_run: bool = False, lease_ttl: float = DEFAULT_LEASE_TTL
) -> dict[str, Any]:
    from memwal.snapshot import execute_snapshot, plan_snapshot

    # Plan before the lease: bad input (a corrupt shard manifest) fails with nothing written.
    plan = plan_snapshot(table, reader=engine_for("snapshot", engine))
    if dry_run:
        return {"dry_run": True, **plan.to_json()}
    # The refresh replaces the MemWAL index entry, which can erase progress committed
    # concurrently (hazard H1). It also holds the merge lease, so memwal-jobs' own mergers
    # never commit during a refresh; its detect-and-repair covers every other writer.
    snapshot_lease, merge_lease = leases(table, lease_ttl, "snapshot", "merge")
    with snapshot_lease as lease:
        with merge_lease.acquire_waiting(MERGE_LEASE_WAIT_SECONDS):
            return execute_snapshot(table, plan, lease=lease).to_json()
