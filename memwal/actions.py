"""The five maintenance actions, each one :class:`Action`: options, plan, execute, leases.

Every action runs the same way (:func:`run`): validate the options (the options class),
plan (pure: reads state, returns a plan that prints as JSON, the dry run), and unless it
is a dry run take the action's leases and execute exactly that plan, re-planning only
after a lost race. The Python API (:mod:`memwal.api`), the CLI, ``memwal backfill``, the
Spark entry points and the Airflow operators all call :func:`run`, so none of them can
drift, and whether a result is a failure is decided in one place: the action's
``problems``.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memwal.errors import BadInputError
from memwal.history.run import recorded
from memwal.observe import progress
from memwal.options import (
    CatchupOptions,
    CompactOptions,
    GcOptions,
    JobOptions,
    MergeOptions,
    SnapshotOptions,
)

if TYPE_CHECKING:
    from memwal.table import Table


@dataclass(frozen=True)
class Action:
    """One maintenance action: what it takes, how it plans and executes, what it locks."""

    name: str
    help: str
    options: type[JobOptions]
    plan: Callable[[Table, Any], Any]  # (table, options) -> plan with to_json()
    execute: Callable[[Table, Any, Any, Any, Any], Any]  # (table, plan, options, engine, lease) -> result
    engines: dict[str, tuple[str, str]]  # engine name -> (module, class); loaded only when used
    leases: Callable[..., contextlib.AbstractContextManager]  # (table, options, run_id=) -> held leases
    problems: Callable[[dict], list[str]]  # the one place deciding that a result is a failure
    #: What a dry run shows, when not the plan itself (gc shows the result it would give).
    preview: Callable[[Table, Any], Any] | None = None

    def engine(self, name: str) -> Any:
        """The engine object by name; Spark engines are built from the active session."""
        if name not in self.engines:
            raise BadInputError(f"unknown engine {name!r}: expected {' or '.join(self.engines)}")
        module, cls = self.engines[name]
        factory = getattr(importlib.import_module(module), cls)
        return factory.from_active_or_local() if name == "spark" else factory()


@dataclass
class JobResult:
    """What an action returns: its typed plan (dry run) or result, and the verdict."""

    action: str
    dry_run: bool
    value: Any  # MergePlan | MergeResult | GcPlan ... (each has to_json())
    run_id: str | None = None  # the run's id in the table's history (None for a dry run)

    def to_dict(self) -> dict[str, Any]:
        """Exactly the CLI's ``--json`` document (a run's names its ``run_id``: ``memwal history``)."""
        doc = self.value.to_json()
        if self.run_id is not None:
            doc = {**doc, "run_id": self.run_id}
        return {"dry_run": True, **doc} if self.dry_run and "dry_run" not in doc else doc

    @property
    def problems(self) -> list[str]:
        """One line per thing that makes this run a failure (exit code 1)."""
        return ACTIONS[self.action].problems(self.to_dict())

    @property
    def ok(self) -> bool:
        return not self.problems


def lease_set(table: Table, options: JobOptions, *kinds: str, wait_for: tuple[str, ...] = (),
              run_id: str | None = None) -> Any:
    """Take the leases ``kinds`` in order (each ``wait_for`` kind waiting up to
    ``options.lease_wait`` for a live holder to finish), after checking every one of them
    first: a corrupt lease object or a folder in a lease's place fails the action here
    (exit 2) with nothing written.

    Each lease is renewed by its heartbeat while the job runs. The held leases come as a
    :class:`HeldLeases`: :func:`run` checks them all once more when the job is done, so a job
    that lost a lease on the way (taken over while it was frozen, or the store unreachable
    past the TTL) ends with LeaseLostError, exit 3, even if its last step needed no check.
    """
    from memwal.lease import Lease

    leases = [Lease(table.store, kind, ttl_seconds=options.lease_ttl, run_id=run_id) for kind in kinds]
    for lease in leases:
        lease.inspect()

    @contextlib.contextmanager
    def held() -> Iterator[HeldLeases]:
        with contextlib.ExitStack() as stack:
            for lease in leases:
                if lease.kind in wait_for:
                    lease.acquire_waiting(getattr(options, "lease_wait", 0.0))
                stack.enter_context(lease)
            yield HeldLeases(leases)

    return held()


class HeldLeases(list):
    """The leases a job holds, its own kind first."""

    @property
    def primary(self) -> Any:
        return self[0]

    def check(self) -> None:
        """LeaseLostError (exit 3) if any of them was lost."""
        for lease in self:
            lease.check()


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


def _plan_compact(table: Table, o: CompactOptions) -> Any:
    from memwal.compact import plan_compaction

    return plan_compaction(table, o)


def _execute_compact(table: Table, plan: Any, o: CompactOptions, engine: Any, lease: Any) -> Any:
    from memwal.compact import run_compact

    catchup_engine = ACTIONS["catchup"].engine(o.engine)
    return run_compact(table, plan=plan, options=o, engine=engine, lease=lease, catchup_engine=catchup_engine)


# ----------------------------------------------------------------------------- snapshot


def _plan_snapshot(table: Table, o: SnapshotOptions) -> Any:
    from memwal.snapshot import plan_snapshot

    return plan_snapshot(table, reader=ACTIONS["snapshot"].engine(o.engine))


def _execute_snapshot(table: Table, plan: Any, o: SnapshotOptions, engine: Any, lease: Any) -> Any:
    from memwal.snapshot import execute_snapshot

    return execute_snapshot(table, plan, lease=lease)


# ----------------------------------------------------------------------------- gc


def _plan_gc(table: Table, o: GcOptions) -> Any:
    from memwal.gc import prepare_gc

    # Plans once, before the lease: bad input (a corrupt WAL entry, an audit path that is a
    # file) fails with nothing written. A concurrent GC deleting what we listed is retried
    # inside; run_gc re-checks the gates against the latest table version right before it
    # deletes, so a plan made before the lease stays safe.
    return prepare_gc(table, audit=o.audit, grace_seconds=o.grace_seconds, orphan_age_seconds=o.orphan_age_seconds,
                      history_retention_seconds=o.history_retention)


def _execute_gc(table: Table, plan: Any, o: GcOptions, engine: Any, lease: Any) -> Any:
    from memwal.gc import run_gc

    return run_gc(table, plan=plan, engine=engine, lease=lease, expire_versions_seconds=o.expire_versions,
                  orphans=o.orphans, audit=o.audit, grace_seconds=o.grace_seconds,
                  orphan_age_seconds=o.orphan_age_seconds, history_retention_seconds=o.history_retention)


def _preview_gc(table: Table, plan: Any) -> Any:
    from memwal.gc import dry_run_result

    return dry_run_result(table, plan)


def _gc_problems(doc: dict) -> list[str]:
    # Other shards were collected; a broken shard was left whole, and a link planted in
    # the table (or a manifest path leaving its shard) needs an operator.
    out = [f"{b['detail']} (nothing in it was collected)" for b in doc.get("broken_shards", [])]
    unsafe = [", ".join(b.get("reasons", [])[1:]) or f"shard {b['shard_id']} generation {b['generation']}"
              for b in doc["blocked"] if b["reason"] == "unsafe-path"]
    if unsafe:
        out.append(f"unsafe paths refused, nothing deleted through them: {'; '.join(unsafe)}")
    return out


def _single(kind: str, *, wait: bool = False) -> Callable[..., Any]:
    return lambda table, o, run_id=None: lease_set(table, o, kind, wait_for=(kind,) if wait else (), run_id=run_id)


def _none(doc: dict) -> list[str]:
    return []


def _spark(module: str, cls: str) -> dict[str, tuple[str, str]]:
    return {"spark": (f"memwal.spark.{module}", cls)}


#: Every action, in the order a maintenance cycle runs them.
ACTIONS: dict[str, Action] = {
    a.name: a
    for a in (
        Action("merge", "merge flushed generations into the base table, in order, with atomic progress",
               MergeOptions, _plan_merge, _execute_merge,
               {"local": ("memwal.merge.execute", "LocalEngine"), **_spark("spark_engine", "SparkMergeEngine")},
               _single("merge", wait=True), _merge_problems),
        Action("catchup", "bring base-table indexes up to the merged generations",
               CatchupOptions, _plan_catchup, _execute_catchup,
               {"local": ("memwal.catchup", "LocalCatchupEngine"), **_spark("spark_catchup", "SparkCatchupEngine")},
               _single("catchup"), _none),
        Action("compact", "rewrite small fragments and materialise deletions, keeping progress and index catch-up",
               CompactOptions, _plan_compact, _execute_compact,
               {"local": ("memwal.compact", "LocalCompactEngine"), **_spark("spark_compact", "SparkCompactEngine")},
               _single("compact"), _none),
        # The refresh replaces the MemWAL index entry, which can erase progress committed
        # concurrently (hazard H1). It also holds the merge lease, so memwal-jobs' own
        # mergers never commit during it; its detect-and-repair covers every other writer.
        Action("snapshot", "publish every shard's state in the MemWAL index (the shard snapshot)",
               SnapshotOptions, _plan_snapshot, _execute_snapshot,
               {"local": ("memwal.snapshot", "LocalManifestReader"),
                **_spark("spark_snapshot", "SparkManifestReader")},
               lambda table, o, run_id=None: lease_set(table, o, "snapshot", "merge", wait_for=("merge",),
                                                       run_id=run_id), _none),
        Action("gc", "delete merged, indexed, unretained generations and their WAL entries",
               GcOptions, _plan_gc, _execute_gc,
               {"local": ("memwal.gc", "LocalGcEngine"), **_spark("spark_gc", "SparkGcEngine")},
               _single("gc"), _gc_problems, _preview_gc),
    )
}


def action(name: str) -> Action:
    if name not in ACTIONS:
        raise BadInputError(f"unknown job {name!r}: expected one of {', '.join(ACTIONS)}")
    return ACTIONS[name]


def prepare_engine(name: str, options: JobOptions) -> None:
    """Start what the engine needs before planning: a Spark session boots in the background
    (``memwal.spark.session.start_local_session``) while the job plans. Called once the table
    has opened, so bad input starts no JVM; nothing for a dry run or the local engine; idempotent."""
    if options.dry_run or options.engine != "spark" or "spark" not in action(name).engines:
        return
    importlib.import_module("memwal.spark.session").start_local_session()


def run(name: str, table: Table, options: JobOptions) -> JobResult:
    """Plan, then (unless a dry run) take the leases and execute exactly that plan."""
    act = action(name)
    prepare_engine(name, options)
    plan = act.plan(table, options)
    if options.dry_run:
        return JobResult(name, True, act.preview(table, plan) if act.preview else plan)
    progress.planned(name, plan)  # a display (the CLI on a terminal) shows what is coming
    engine = progress.engine(name, act.engine(options.engine))
    run_id = new_run_id()
    with act.leases(table, options, run_id=run_id) as leases:
        with recorded(table, name, run_id, getattr(engine, "name", options.engine), leases.primary.holder) as ctx:
            result = JobResult(name, False, act.execute(table, plan, options, engine, leases.primary), run_id)
            leases.check()
            ctx.doc, ctx.problems = result.to_dict(), result.problems
    return result


def new_run_id() -> str:
    """A run's id: on its leases (``memwal lease`` shows it) and, later, in its history."""
    import uuid

    return uuid.uuid4().hex[:16]


def run_action(name: str, table: str | Table, storage_options: dict[str, str] | None = None,
               **options: Any) -> dict[str, Any]:
    """Run one action by name with keyword options; the ``--json`` document.

    Options are validated before the table is opened: bad input leaves nothing written.
    """
    from memwal.table import open_table

    opts = action(name).options.from_kwargs(**options)
    t = open_table(table, storage_options) if isinstance(table, str) else table
    return run(name, t, opts).to_dict()
