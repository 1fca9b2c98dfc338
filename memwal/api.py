"""The public Python API: ``memwal.open(uri)`` and the :class:`MemWalTable` it returns.

Each method is the CLI command of the same name: it takes the command's options as keyword
arguments of the same names (``dry_run=``, ``engine=``, ``shards=``, ``grace_seconds=``, ...;
validated by the action's options class, so ``grace_seconds=float("nan")`` is refused as on
the command line; a duration is seconds or a ``timedelta``) and returns a typed result whose
``to_dict()`` is exactly the ``--json`` document and ``to_json()`` the same as text. Overloads
type the value: ``t.merge(dry_run=True).value`` is a ``MergePlan``, ``t.merge().value`` a
``MergeResult``; ``t.plan_merge()`` returns the plan alone.
Errors are the exceptions of :mod:`memwal.errors`, whose ``exit_code`` is the CLI's.

>>> from datetime import timedelta
>>> import memwal
>>> t = memwal.open("s3://lake/events", storage_options={"aws_region": "us-east-1"})
>>> t.merge(max_generations=8).value.version                 # doctest: +SKIP
>>> t.gc(dry_run=True, grace_seconds=timedelta(minutes=10)).value.blocked  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypedDict, overload

if TYPE_CHECKING:  # imported lazily: `import memwal` stays cheap
    from typing import Unpack

    import pyarrow as pa

    from memwal.actions import JobResult
    from memwal.actions.merge_ops import MergeOpsChange
    from memwal.actions.options import Engine  # the one list of engines
    from memwal.catchup import CatchupPlan, CatchupResult
    from memwal.checkpoint import Checkpoint, ManagedCheckpoint
    from memwal.compact import CompactPlan, CompactResult
    from memwal.gc import GcPlan, GcResult
    from memwal.history.timeline import History
    from memwal.inspect.status import TableStatus
    from memwal.inspect.verify import VerifyResult
    from memwal.lease import LeaseInfo
    from memwal.merge import MergePlan, MergeResult
    from memwal.read import ReadPlan
    from memwal.snapshot import SnapshotPlan, SnapshotResult
    from memwal.table import Table

#: A duration: seconds, or a :class:`~datetime.timedelta` (converted where options are validated).
Seconds = float | timedelta


# Each action's options as keywords (None: the option's default, declared once in
# memwal.actions.options). The ``plan_<job>`` methods take the planning ones; ``<job>()`` adds
# the running ones (engine, leases). tests/unit/test_api.py keeps them in step with the
# options classes, which the CLI's flags come from.


class MergePlanOptions(TypedDict, total=False):
    shards: Sequence[str] | None
    max_generations: int | None
    max_rows: int | None
    max_bytes: int | None


class CatchupPlanOptions(TypedDict, total=False):
    indexes: Sequence[str] | None
    max_deltas: int | None
    max_unindexed_fraction: float | None


class CompactPlanOptions(TypedDict, total=False):
    target_rows_per_fragment: int | None
    max_rows_per_group: int | None
    materialize_deletions_threshold: float | None
    max_fragments: int | None


class SnapshotPlanOptions(TypedDict, total=False):
    pass


class GcPlanOptions(TypedDict, total=False):
    grace_seconds: Seconds | None
    expire_versions: Seconds | Literal["never"] | None
    orphans: bool
    orphan_age_seconds: Seconds | None
    audit: bool
    history_retention: Seconds | None
    writer_idle_seconds: Seconds | None


class RunOptions(TypedDict, total=False):
    engine: Engine | None
    lease_ttl: Seconds | None


class WaitingRunOptions(RunOptions, total=False):
    lease_wait: Seconds | None


class MergeRunOptions(MergePlanOptions, WaitingRunOptions, total=False):
    pass


class CatchupRunOptions(CatchupPlanOptions, RunOptions, total=False):
    pass


class CompactRunOptions(CompactPlanOptions, RunOptions, total=False):
    pass


class SnapshotRunOptions(SnapshotPlanOptions, WaitingRunOptions, total=False):
    pass


class GcRunOptions(GcPlanOptions, RunOptions, total=False):
    pass


class MemWalTable:
    """One Lance table with a MemWAL, and the maintenance actions on it."""

    def __init__(self, table: Table) -> None:
        self._table = table

    @property
    def uri(self) -> str:
        return self._table.uri

    @property
    def table(self) -> Table:
        """The underlying table handle (URI, storage options, Lance dataset, object store)."""
        return self._table

    def __repr__(self) -> str:
        return f"MemWalTable({self.uri!r})"

    # -- the actions: plan, then execute exactly that plan (or only plan: dry_run=True)
    #
    # Each takes its command's options as keywords, by the same names. A dry run's value is
    # the plan (gc: the result the run would give), typed by the overloads: a caller never
    # tests the type. plan_<job>() returns the plan alone.

    def _run(self, name: str, options: dict[str, Any]) -> JobResult[Any]:
        from memwal import actions

        opts = actions.action(name).options.from_kwargs(**options)
        return actions.run(name, self._table, opts)

    def _plan(self, name: str, options: dict[str, Any]) -> Any:
        """The plan of a dry run with ``options``: nothing written, no engine started."""
        from memwal import actions

        act = actions.action(name)
        return act.plan(self._table, act.options.from_kwargs(**options, dry_run=True))

    @overload
    def merge(self, *, dry_run: Literal[True], **options: Unpack[MergeRunOptions]) -> JobResult[MergePlan]: ...
    @overload
    def merge(self, *, dry_run: Literal[False] = False,
              **options: Unpack[MergeRunOptions]) -> JobResult[MergeResult]: ...
    @overload
    def merge(self, *, dry_run: bool,
              **options: Unpack[MergeRunOptions]) -> JobResult[MergePlan] | JobResult[MergeResult]: ...

    def merge(self, *, shards: Sequence[str] | None = None, max_generations: int | None = None,
              max_rows: int | None = None, max_bytes: int | None = None, engine: Engine | None = None,
              dry_run: bool = False, lease_ttl: Seconds | None = None,
              lease_wait: Seconds | None = None) -> JobResult[MergePlan] | JobResult[MergeResult]:
        """Merge flushed generations into the base table: per shard in order, progress in
        the same commit as the rows. A dry run's value is the :class:`MergePlan`."""
        return self._run("merge", dict(shards=shards, max_generations=max_generations, max_rows=max_rows,
                                       max_bytes=max_bytes, engine=engine, dry_run=dry_run, lease_ttl=lease_ttl,
                                       lease_wait=lease_wait))

    def plan_merge(self, **options: Unpack[MergePlanOptions]) -> MergePlan:
        """What :meth:`merge` would merge (its dry run's value)."""
        plan: MergePlan = self._plan("merge", dict(options))
        return plan

    @overload
    def catchup(self, *, dry_run: Literal[True], **options: Unpack[CatchupRunOptions]) -> JobResult[CatchupPlan]: ...
    @overload
    def catchup(self, *, dry_run: Literal[False] = False,
                **options: Unpack[CatchupRunOptions]) -> JobResult[CatchupResult]: ...
    @overload
    def catchup(self, *, dry_run: bool,
                **options: Unpack[CatchupRunOptions]) -> JobResult[CatchupPlan] | JobResult[CatchupResult]: ...

    def catchup(self, *, indexes: Sequence[str] | None = None, max_deltas: int | None = None,
                max_unindexed_fraction: float | None = None, engine: Engine | None = None, dry_run: bool = False,
                lease_ttl: Seconds | None = None) -> JobResult[CatchupPlan] | JobResult[CatchupResult]:
        """Bring the maintained indexes up to the merged generations."""
        return self._run("catchup", dict(indexes=indexes, max_deltas=max_deltas,
                                         max_unindexed_fraction=max_unindexed_fraction, engine=engine,
                                         dry_run=dry_run, lease_ttl=lease_ttl))

    def plan_catchup(self, **options: Unpack[CatchupPlanOptions]) -> CatchupPlan:
        """What :meth:`catchup` would do (its dry run's value)."""
        plan: CatchupPlan = self._plan("catchup", dict(options))
        return plan

    @overload
    def compact(self, *, dry_run: Literal[True], **options: Unpack[CompactRunOptions]) -> JobResult[CompactPlan]: ...
    @overload
    def compact(self, *, dry_run: Literal[False] = False,
                **options: Unpack[CompactRunOptions]) -> JobResult[CompactResult]: ...
    @overload
    def compact(self, *, dry_run: bool,
                **options: Unpack[CompactRunOptions]) -> JobResult[CompactPlan] | JobResult[CompactResult]: ...

    def compact(self, *, target_rows_per_fragment: int | None = None, max_rows_per_group: int | None = None,
                materialize_deletions_threshold: float | None = None, max_fragments: int | None = None,
                engine: Engine | None = None, dry_run: bool = False,
                lease_ttl: Seconds | None = None) -> JobResult[CompactPlan] | JobResult[CompactResult]:
        """Compact fragments, keeping the merge progress and the index catch-up."""
        return self._run("compact", dict(target_rows_per_fragment=target_rows_per_fragment,
                                         max_rows_per_group=max_rows_per_group,
                                         materialize_deletions_threshold=materialize_deletions_threshold,
                                         max_fragments=max_fragments, engine=engine, dry_run=dry_run,
                                         lease_ttl=lease_ttl))

    def plan_compact(self, **options: Unpack[CompactPlanOptions]) -> CompactPlan:
        """What :meth:`compact` would rewrite (its dry run's value)."""
        plan: CompactPlan = self._plan("compact", dict(options))
        return plan

    @overload
    def snapshot(self, *, dry_run: Literal[True],
                 **options: Unpack[SnapshotRunOptions]) -> JobResult[SnapshotPlan]: ...
    @overload
    def snapshot(self, *, dry_run: Literal[False] = False,
                 **options: Unpack[SnapshotRunOptions]) -> JobResult[SnapshotResult]: ...
    @overload
    def snapshot(self, *, dry_run: bool,
                 **options: Unpack[SnapshotRunOptions]) -> JobResult[SnapshotPlan] | JobResult[SnapshotResult]: ...

    def snapshot(self, *, engine: Engine | None = None, dry_run: bool = False, lease_ttl: Seconds | None = None,
                 lease_wait: Seconds | None = None) -> JobResult[SnapshotPlan] | JobResult[SnapshotResult]:
        """Publish every shard's state in the MemWAL index (the shard snapshot)."""
        return self._run("snapshot", dict(engine=engine, dry_run=dry_run, lease_ttl=lease_ttl,
                                          lease_wait=lease_wait))

    def plan_snapshot(self, **options: Unpack[SnapshotPlanOptions]) -> SnapshotPlan:
        """What :meth:`snapshot` would publish (its dry run's value; manifests read in-process)."""
        plan: SnapshotPlan = self._plan("snapshot", dict(options))
        return plan

    def gc(self, *, grace_seconds: Seconds | None = None, expire_versions: Seconds | Literal["never"] | None = None,
           orphans: bool = False, orphan_age_seconds: Seconds | None = None, audit: bool = False,
           history_retention: Seconds | None = None, writer_idle_seconds: Seconds | None = None,
           engine: Engine | None = None, dry_run: bool = False,
           lease_ttl: Seconds | None = None) -> JobResult[GcResult]:
        """Delete what nothing can need any more; every kept item says which gates keep it.
        A dry run's value is what the run would do (same items, same bytes: :meth:`GcPlan.preview`)."""
        return self._run("gc", dict(grace_seconds=grace_seconds, expire_versions=expire_versions, orphans=orphans,
                                    orphan_age_seconds=orphan_age_seconds, audit=audit,
                                    history_retention=history_retention, writer_idle_seconds=writer_idle_seconds,
                                    engine=engine, dry_run=dry_run, lease_ttl=lease_ttl))

    def plan_gc(self, **options: Unpack[GcPlanOptions]) -> GcPlan:
        """The GC plan (every collector's, each kept item with its gates); ``preview()`` is the
        result a run would give, the dry run's value."""
        plan: GcPlan = self._plan("gc", dict(options))
        return plan

    # -- looking

    def status(self, *, html: str | None = None) -> TableStatus:
        """The table's status; with ``html=PATH`` also the status page written there
        (``memwal status --html``: one self-contained file, see :mod:`memwal.inspect.page`)."""
        from memwal.inspect.status import table_status

        st = table_status(self._table)
        if html is not None:
            from memwal.inspect.page import collect, write_page

            write_page(html, collect(self._table, status=st))
        return st

    def verify(self) -> VerifyResult:
        from memwal.inspect.verify import verify_table

        return verify_table(self._table)

    def scan(self, *, columns: list[str] | None = None, filter: str | None = None, limit: int | None = None,
             source: str = "index", checkpoint: str | None = None) -> pa.Table:
        """The rows a reader sees now: base table plus unmerged generations (folded by the
        table's merge operators, if any), pruned by ``filter`` where the sharding allows; or,
        given a ``checkpoint`` id, the rows it saw at its moment."""
        from memwal.read import fresh_scan, lsm_scan

        if checkpoint is not None:  # a pinned view: nothing moves under it
            return lsm_scan(self._table, columns=columns, filter=filter, limit=limit,
                            plan=self._checkpoint_plan(checkpoint))
        return fresh_scan(self._table, columns=columns, filter=filter, limit=limit, source=source)[1]

    def lookup(self, keys: Any, *, columns: list[str] | None = None, source: str = "index",
               checkpoint: str | None = None) -> pa.Table:
        """The live rows of primary keys ``keys`` as a reader sees them now, in the order given
        (an absent or deleted key gives no row), through pylance's ``LsmPointLookupPlanner``
        (folded by the table's merge operators, if any). ``keys``: values of a one-column key,
        tuples or mappings of a composite one, or Arrow data with the key columns. With a
        ``checkpoint`` id: as a reader saw them at its moment."""
        from memwal.read import lookup

        return lookup(self._table, keys, columns=columns, source=source, plan=self._checkpoint_plan(checkpoint))

    def nearest(self, column: str, query: Any, *, k: int = 10, filter: str | None = None,
                columns: list[str] | None = None, metric: str | None = None, nprobes: int = 20,
                source: str = "index", checkpoint: str | None = None) -> pa.Table:
        """The ``k`` live rows nearest to ``query`` (a vector) in ``column``, nearest first,
        with a ``_distance`` column, among rows matching ``filter``: pylance's
        ``LsmVectorSearchPlanner`` when the column's vector index covers every row a reader
        sees, else an exact search (an index not caught up yet, a generation without the
        index, a ``metric`` other than the index's). With a ``checkpoint`` id: among the rows
        of its moment."""
        from memwal.read import nearest

        return nearest(self._table, column, query, k=k, filter=filter, columns=columns, metric=metric,
                       nprobes=nprobes, source=source, plan=self._checkpoint_plan(checkpoint))

    def _checkpoint_plan(self, checkpoint: str | None) -> ReadPlan | None:
        """The read plan of a live checkpoint (None: read now)."""
        if checkpoint is None:
            return None
        from memwal.checkpoint import checkpoint_or_error, read_plan

        return read_plan(self._table, checkpoint_or_error(self._table, checkpoint))

    # -- long readers

    def checkpoint(self, *, lifetime: float, name: str | None = None, refresh: bool = True) -> ManagedCheckpoint:
        """A checkpoint for a ``with`` block: created on entry, refreshed in the background every
        third of ``lifetime`` while held (``refresh=False``: not), deleted on exit.

        >>> with t.checkpoint(lifetime=600) as cp:      # doctest: +SKIP
        ...     rows = cp.scan(filter="id < 100")       # the view of that moment, however long it takes
        """
        from memwal.checkpoint import ManagedCheckpoint
        from memwal.checkpoint import lifetime as check_lifetime

        return ManagedCheckpoint(self._table, lifetime=check_lifetime(lifetime), name=name, refresh=refresh)

    def checkpoints(self) -> list[Checkpoint]:
        """Every checkpoint of the table, live and expired (``memwal checkpoint list``)."""
        from memwal.checkpoint import list_checkpoints

        return list_checkpoints(self._table)

    def history(self, *, limit: int = 20, job: str | None = None, since: str | float | None = None) -> History:
        """Job runs newest first (``memwal history``): ``.runs``, ``.to_dict()``."""
        from memwal.history.timeline import history, parse_since

        return history(self._table, limit=limit, job=job, since=parse_since(since))

    def leases(self) -> list[LeaseInfo]:
        from memwal.lease import list_leases

        return list_leases(self._table.store)

    def merge_ops(self, *, set: dict[str, str] | None = None, unset: list[str] | None = None,
                  force: bool = False) -> MergeOpsChange:
        """Show (no arguments) or change the columns' merge operators."""
        from memwal.actions.merge_ops import change_merge_ops

        return change_merge_ops(self._table, set_ops=set, unset=unset, force=force)


def open(uri: str, storage_options: dict[str, str] | None = None) -> MemWalTable:  # noqa: A001 - the API's name
    """Open a MemWAL table (local path or ``s3://bucket/prefix``); bad input raises
    :class:`~memwal.errors.BadInputError` naming what is wrong."""
    from memwal.core.process import quiet_lance

    quiet_lance()  # before Lance loads (its log filter is read then)
    from memwal.store.options import check_storage_options
    from memwal.table import open_table

    return MemWalTable(open_table(uri, check_storage_options(storage_options)))
