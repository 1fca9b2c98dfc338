"""The public Python API: ``memwal.open(uri)`` and the `MemWalTable` it returns.

Each method is the CLI command of the same name: it takes the command's options as keyword
arguments of the same names (``dry_run=``, ``engine=``, ``shards=``, ``grace_seconds=``, ...;
validated by the action's options class, so ``grace_seconds=float("nan")`` is refused as on
the command line; a duration is seconds or a ``timedelta``) and returns a typed result whose
``to_dict()`` is exactly the ``--json`` document and ``to_json()`` the same as text. Overloads
type the value: ``t.merge(dry_run=True).value`` is a ``MergePlan``, ``t.merge().value`` a
``MergeResult``; ``t.plan_merge()`` returns the plan alone.
Errors are the exceptions of `memwal.errors`, whose ``exit_code`` is the CLI's.

Docstrings here are Google style, the one mkdocstrings renders for the API reference
(docs/reference/python-api.md): every parameter and what each method returns.

Examples:
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

from memwal.core.process import quiet_lance

if TYPE_CHECKING:  # imported lazily: `import memwal` stays cheap
    from typing import Unpack

    import pyarrow as pa

    from memwal.actions import JobResult
    from memwal.actions.merge_ops import MergeOpsChange
    from memwal.actions.options import Engine  # the one list of engines
    from memwal.actions.policy import TablePolicy
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
    from memwal.repair import RepairPlan, RepairResult
    from memwal.snapshot import SnapshotPlan, SnapshotResult
    from memwal.table import Table
    from memwal.table.writer import WriterView
    from memwal.table.writers_closed import ClosedWriter

#: A duration: seconds, or a `datetime.timedelta` (converted where options are validated).
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
    listed_only: bool


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
    """One Lance table with a MemWAL, and the maintenance actions on it (`memwal.open` returns one).

    The job methods (`merge`, `catchup`, `compact`, `snapshot`, `gc`) are the CLI commands of the
    same names: keyword options only, each the snake_case of the command's flag, ``None`` for the
    command's default; they return a `JobResult` whose ``to_dict()`` is the command's ``--json``
    document. With ``dry_run=True`` its ``value`` is the plan and nothing is written; otherwise
    the job takes its lease and executes exactly that plan. The ``plan_<job>`` methods return the
    plan alone. Bad values raise `memwal.errors.BadInputError` before anything is read or written.

    Args:
        table: The opened table handle; use `memwal.open` rather than building one.
    """

    def __init__(self, table: Table) -> None:
        self._table = table

    @property
    def uri(self) -> str:
        """The table's URI, as given to `memwal.open` (a local path normalised to an absolute one)."""
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
        """Merge flushed generations into the base table (``memwal merge``).

        Per shard in ascending order with no gap; the merged generation is recorded in the same
        commit as the rows. Within the batch a key's newest version wins; tombstones delete.

        Args:
            shards: Shard ids to merge (default: every shard).
            max_generations: At most this many generations per shard in one run.
            max_rows: Stop adding generations to the batch past this many change rows.
            max_bytes: Stop adding generations to the batch past this many bytes.
            engine: ``"local"`` (in this process, the default), ``"spark"`` or ``"ray"``.
            dry_run: Plan only: nothing written, no lease taken, no engine started.
            lease_ttl: Seconds (or a `timedelta`) the lease lives between renewals (default 300).
            lease_wait: Seconds (or a `timedelta`) to wait for the merge lease another job holds before
                giving up with `memwal.errors.LeaseHeldError` (default 30).

        Returns:
            A `JobResult`: its value is the `MergePlan` for a dry run, else the `MergeResult`
                (the new version, each shard's generations and rows, or ``version`` None when
                there was nothing to merge).

        Raises:
            memwal.errors.BadInputError: A bad option or table (exit code 2), before anything is written.
            memwal.errors.LeaseHeldError: Another live merge holds the lease (exit code 3).
            memwal.errors.LeaseLostError: The lease was lost during the run (exit code 3).
            memwal.errors.MemWalError: The merge failed (exit code 1), e.g. a gap in a shard's generations.
        """
        return self._run("merge", dict(shards=shards, max_generations=max_generations, max_rows=max_rows,
                                       max_bytes=max_bytes, engine=engine, dry_run=dry_run, lease_ttl=lease_ttl,
                                       lease_wait=lease_wait))

    def plan_merge(self, **options: Unpack[MergePlanOptions]) -> MergePlan:
        """What `merge` would merge: its dry run's value, with nothing written and no lease.

        Args:
            **options: `merge`'s planning options: ``shards``, ``max_generations``, ``max_rows``, ``max_bytes``.

        Returns:
            The `MergePlan`: per shard, the generations in order, and the shards blocked with why.
        """
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
        """Bring the maintained indexes up to the merged generations (``memwal catchup``).

        Args:
            indexes: Index names to catch up (default: the MemWAL index's maintained ones).
            max_deltas: Retrain an index that has this many deltas or more (default 8).
            max_unindexed_fraction: Retrain when more than this fraction of the rows is unindexed (default 0.5).
            engine: ``"local"`` (the default), ``"spark"`` or ``"ray"`` (index segments built per fragment group).
            dry_run: Plan only: nothing written, no lease taken, no engine started.
            lease_ttl: Seconds (or a `timedelta`) the lease lives between renewals (default 300).

        Returns:
            A `JobResult`: its value is the `CatchupPlan` for a dry run, else the `CatchupResult`
                (the new version and each index's catch-up as recorded).

        Raises:
            memwal.errors.BadInputError: A bad option, or an index the table does not have (exit code 2).
            memwal.errors.LeaseHeldError: Another live catch-up holds the lease (exit code 3).
            memwal.errors.LeaseLostError: The lease was lost during the run (exit code 3).
        """
        return self._run("catchup", dict(indexes=indexes, max_deltas=max_deltas,
                                         max_unindexed_fraction=max_unindexed_fraction, engine=engine,
                                         dry_run=dry_run, lease_ttl=lease_ttl))

    def plan_catchup(self, **options: Unpack[CatchupPlanOptions]) -> CatchupPlan:
        """What `catchup` would do: its dry run's value, with nothing written and no lease.

        Args:
            **options: `catchup`'s planning options: ``indexes``, ``max_deltas``, ``max_unindexed_fraction``.

        Returns:
            The `CatchupPlan`: per index, what it would do (optimize, retrain, wait) and why.
        """
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
        """Rewrite small fragments and materialise deletions (``memwal compact``).

        The merge progress is kept and the index catch-up re-earned in the same run (Lance's own
        compaction drops it: hazard H4).

        Args:
            target_rows_per_fragment: Rows per fragment after compaction (default: Lance's, 1,048,576).
            max_rows_per_group: Rows per row group in the rewritten files (default: Lance's, 1,024).
            materialize_deletions_threshold: Rewrite a fragment once more than this fraction of its rows
                is deleted (default: Lance's, 0.1).
            max_fragments: Rewrite at most this many fragments in this run, oldest first.
            engine: ``"local"`` (the default), ``"spark"`` or ``"ray"`` (one task per Lance task).
            dry_run: Plan only: nothing written, no lease taken, no engine started.
            lease_ttl: Seconds (or a `timedelta`) the lease lives between renewals (default 300).

        Returns:
            A `JobResult`: its value is the `CompactPlan` for a dry run, else the `CompactResult`
                (fragments before and after, deletions materialised, the catch-up kept).

        Raises:
            memwal.errors.BadInputError: A bad option (exit code 2), before anything is written.
            memwal.errors.LeaseHeldError: Another live compaction holds the lease (exit code 3).
            memwal.errors.LeaseLostError: The lease was lost during the run (exit code 3).
        """
        return self._run("compact", dict(target_rows_per_fragment=target_rows_per_fragment,
                                         max_rows_per_group=max_rows_per_group,
                                         materialize_deletions_threshold=materialize_deletions_threshold,
                                         max_fragments=max_fragments, engine=engine, dry_run=dry_run,
                                         lease_ttl=lease_ttl))

    def plan_compact(self, **options: Unpack[CompactPlanOptions]) -> CompactPlan:
        """What `compact` would rewrite: its dry run's value, with nothing written and no lease.

        Args:
            **options: `compact`'s planning options: ``target_rows_per_fragment``, ``max_rows_per_group``,
                ``materialize_deletions_threshold``, ``max_fragments``.

        Returns:
            The `CompactPlan`: the tasks (fragments to rewrite) and the progress the commit must keep.
        """
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
        """Publish every shard's state in the MemWAL index, the snapshot readers start from (``memwal snapshot``).

        Args:
            engine: ``"local"`` (the default), ``"spark"`` or ``"ray"`` (shard manifests read in parallel).
            dry_run: Plan only: nothing written, no lease taken, no engine started.
            lease_ttl: Seconds (or a `timedelta`) the lease lives between renewals (default 300).
            lease_wait: Seconds (or a `timedelta`) to wait for the merge lease (a merge and a refresh
                serialise through it) before giving up with `memwal.errors.LeaseHeldError` (default 30).

        Returns:
            A `JobResult`: its value is the `SnapshotPlan` for a dry run, else the `SnapshotResult`
                (``version`` None, with a ``reason``, when nothing changed since the last snapshot).

        Raises:
            memwal.errors.LeaseHeldError: Another live refresh, or a merge, holds its lease (exit code 3).
            memwal.errors.LeaseLostError: The lease was lost during the run (exit code 3).
        """
        return self._run("snapshot", dict(engine=engine, dry_run=dry_run, lease_ttl=lease_ttl,
                                          lease_wait=lease_wait))

    def plan_snapshot(self, **options: Unpack[SnapshotPlanOptions]) -> SnapshotPlan:
        """What `snapshot` would publish: its dry run's value (shard manifests read in this process).

        Args:
            **options: None today; accepted for symmetry with the other ``plan_<job>`` methods.

        Returns:
            The `SnapshotPlan`: each shard's row, where it would be stored, or why nothing needs publishing.
        """
        plan: SnapshotPlan = self._plan("snapshot", dict(options))
        return plan

    def gc(self, *, grace_seconds: Seconds | None = None, expire_versions: Seconds | Literal["never"] | None = None,
           orphans: bool = False, orphan_age_seconds: Seconds | None = None, audit: bool = False,
           history_retention: Seconds | None = None, writer_idle_seconds: Seconds | None = None,
           engine: Engine | None = None, dry_run: bool = False,
           lease_ttl: Seconds | None = None, listed_only: bool = False) -> JobResult[GcResult]:
        """Delete what nothing can need any more (``memwal gc``); every kept item says which gates keep it.

        Merged generations first leave the shard manifests (the drain), then they and their WAL
        entries are deleted once merged, caught up by every maintained index, outside every
        retained version and live checkpoint, past the grace period and outside a live writer's view.

        Args:
            grace_seconds: Reader grace period after the merge commit: a reader that listed a
                generation before its merge may still read it this long (default 600).
            expire_versions: First expire base-table versions older than this with Lance's cleanup
                (seconds or a `timedelta`; default 7 days; tags, branches and checkpoints are kept);
                ``"never"`` keeps every version.
            orphans: Also remove unlisted generation directories and a crashed merge's staging.
            orphan_age_seconds: How old an orphan must be to be removed (default 3600).
            audit: Also write the audit record under ``_mem_wal/_jobs/audit/`` in the table's store.
            history_retention: Prune the run history of runs older than this (default 90 days).
            writer_idle_seconds: A shard writer quiet this long is presumed gone; until then the merged
                generations its view needs stay listed and on storage (default 1 day; 0: no writer is live).
            engine: ``"local"`` (the default), ``"spark"`` or ``"ray"`` (one task per shard).
            dry_run: Plan only: the value is the result the run would give, same items, same bytes.
            lease_ttl: Seconds (or a `timedelta`) the lease lives between renewals (default 300).
            listed_only: A listing pass: roll up and heal what the shard manifests list, walking only
                their folders; it drains and deletes nothing (a follower's pass after each merge).

        Returns:
            A `JobResult` whose value is the `GcResult`: what was (or would be) deleted and drained,
                the bytes freed, and every blocked generation with the gates that keep it.

        Raises:
            memwal.errors.BadInputError: A bad option, e.g. a negative duration (exit code 2).
            memwal.errors.LeaseHeldError: Another live GC holds the lease (exit code 3).
            memwal.errors.LeaseLostError: The lease was lost during the run (exit code 3).
        """
        return self._run("gc", dict(grace_seconds=grace_seconds, expire_versions=expire_versions, orphans=orphans,
                                    orphan_age_seconds=orphan_age_seconds, audit=audit,
                                    history_retention=history_retention, writer_idle_seconds=writer_idle_seconds,
                                    engine=engine, dry_run=dry_run, lease_ttl=lease_ttl, listed_only=listed_only))

    def plan_gc(self, **options: Unpack[GcPlanOptions]) -> GcPlan:
        """The GC plan: every collector's items, each kept one with its gates.

        Args:
            **options: `gc`'s planning options: ``grace_seconds``, ``expire_versions``, ``orphans``,
                ``orphan_age_seconds``, ``audit``, ``history_retention``, ``writer_idle_seconds``.

        Returns:
            The `GcPlan`; its ``preview()`` is the `GcResult` a run would give (the dry run's value).
        """
        plan: GcPlan = self._plan("gc", dict(options))
        return plan

    # -- looking

    def status(self, *, html: str | None = None) -> TableStatus:
        """The table's status (``memwal status``).

        Args:
            html: Also write the status page to this path (``memwal status --html``: one
                self-contained file, no script).

        Returns:
            The `TableStatus`: per shard the flushed, merged and unmerged generations and the
                index catch-up; its ``to_json()`` is ``memwal status --json``.
        """
        from memwal.inspect.status import table_status

        st = table_status(self._table)
        if html is not None:
            from memwal.inspect.page import collect, write_page

            write_page(html, collect(self._table, status=st))
        return st

    def verify(self) -> VerifyResult:
        """Check the invariants on the table as it is (``memwal verify``).

        Returns:
            The `VerifyResult`: the checks run, ``ok``, and one problem per failed check.
        """
        from memwal.inspect.verify import verify_table

        return verify_table(self._table)

    def repair(self, *, shard: str | None = None, apply: str | None = None, accept: str | None = None,
               by: str | None = None, lease_ttl: Seconds = 300.0) -> RepairPlan | RepairResult:
        """Merged generations whose rows the base does not hold (``memwal repair``): GC keeps them
        listed and on storage (``progress-unproven``) and never writes rows itself.

        With neither ``apply`` nor ``accept``, the plan (a dry run: each key's value in the
        generation, in the base, and the commit that made the base's) with its ``plan_id``. With
        ``apply=<plan id>`` the generations' rows are written into the base; with
        ``accept=<plan id>`` the base is taken as the truth for them. Either plans again under the
        merge lease and goes only when the plan's id is the one given (BadInputError otherwise,
        nothing written), then records a receipt so the next GC drains them.

        Args:
            shard: Only this shard.
            apply: The plan id to write (from a dry run).
            accept: The plan id to accept (from a dry run).
            by: Who accepts (recorded).
            lease_ttl: The merge lease's time to live, in seconds.

        Returns:
            The `RepairPlan` (no id given: nothing written), or the `RepairResult` of what was
            written or accepted.
        """
        from memwal.errors import BadInputError
        from memwal.lease import Lease
        from memwal.repair import ACCEPTED, APPLY, plan_repair, run_repair

        ttl = lease_ttl.total_seconds() if isinstance(lease_ttl, timedelta) else float(lease_ttl)
        if apply is not None and accept is not None:
            raise BadInputError("repair: apply= or accept=, not both")
        if apply is None and accept is None:
            return plan_repair(self._table, shard=shard)
        with Lease(self._table.store, "merge", ttl_seconds=ttl) as lease:
            lease.check()
            result = run_repair(self._table, APPLY if apply is not None else ACCEPTED, apply or accept or "",
                                shard=shard, by=by)
            lease.check()
        return result

    def scan(self, *, columns: list[str] | None = None, filter: str | None = None, limit: int | None = None,
             source: str = "index", checkpoint: str | None = None) -> pa.Table:
        """The rows a reader sees now: the base table plus the unmerged generations (``memwal scan``).

        Rows are folded by the table's merge operators, if any, and pruned by ``filter`` where the
        sharding allows.

        Args:
            columns: Columns to return (default: all).
            filter: A SQL filter Lance understands, e.g. ``"id IN (1, 2)"``.
            limit: At most this many rows.
            source: ``"index"`` (start from the published shard snapshot, the default) or
                ``"manifests"`` (every shard's latest manifest, authoritative).
            checkpoint: A live checkpoint's id: the rows it saw at its moment instead of now.

        Returns:
            A `pyarrow.Table` of the live rows.

        Raises:
            memwal.errors.BadInputError: A filter Lance cannot parse or type-check, an unknown column,
                or an unknown or expired checkpoint (nothing read).
            memwal.errors.ReadError: A read failed inside Lance.
        """
        from memwal.read import fresh_scan, lsm_scan

        if checkpoint is not None:  # a pinned view: nothing moves under it
            return lsm_scan(self._table, columns=columns, filter=filter, limit=limit,
                            plan=self._checkpoint_plan(checkpoint))
        return fresh_scan(self._table, columns=columns, filter=filter, limit=limit, source=source)[1]

    def lookup(self, keys: Any, *, columns: list[str] | None = None, source: str = "index",
               checkpoint: str | None = None) -> pa.Table:
        """The live rows of some primary keys as a reader sees them now, in the order given.

        Through pylance's ``LsmPointLookupPlanner``, folded by the table's merge operators, if any;
        an absent or deleted key gives no row.

        Args:
            keys: Values of a one-column key, tuples or mappings of a composite one, or Arrow data
                with the key columns.
            columns: Columns to return (default: all).
            source: ``"index"`` (the published shard snapshot, the default) or ``"manifests"``.
            checkpoint: A live checkpoint's id: as a reader saw them at its moment.

        Returns:
            A `pyarrow.Table` with one row per live key found.

        Raises:
            memwal.errors.BadInputError: A key of the wrong type, an unknown column or checkpoint.
            memwal.errors.ReadError: A read failed inside Lance.
        """
        from memwal.read import lookup

        return lookup(self._table, keys, columns=columns, source=source, plan=self._checkpoint_plan(checkpoint))

    def nearest(self, column: str, query: Any, *, k: int = 10, filter: str | None = None,
                columns: list[str] | None = None, metric: str | None = None, nprobes: int = 20,
                source: str = "index", checkpoint: str | None = None) -> pa.Table:
        """The ``k`` live rows nearest to a query vector, nearest first, with a ``_distance`` column.

        Pylance's ``LsmVectorSearchPlanner`` when the column's vector index covers every row a
        reader sees, else an exact search (an index not caught up yet, a generation without the
        index, a ``metric`` other than the index's).

        Args:
            column: The vector column.
            query: The query vector (its size must be the column's).
            k: How many rows.
            filter: A SQL filter the rows must match.
            columns: Columns to return besides ``_distance`` (default: all).
            metric: ``"l2"``, ``"cosine"`` or ``"dot"`` (default: the index's, else l2).
            nprobes: Index partitions probed by an indexed search.
            source: ``"index"`` (the published shard snapshot, the default) or ``"manifests"``.
            checkpoint: A live checkpoint's id: among the rows of its moment.

        Returns:
            A `pyarrow.Table` of at most ``k`` rows, nearest first.

        Raises:
            memwal.errors.BadInputError: An unknown column, a query of the wrong size, a bad filter.
            memwal.errors.ReadError: A read failed inside Lance.
        """
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

    def checkpoint(self, *, lifetime: Seconds, name: str | None = None, refresh: bool = True) -> ManagedCheckpoint:
        """A reader checkpoint for a ``with`` block: it pins the table's view of its moment.

        Created on entry, refreshed in the background every third of ``lifetime`` while held,
        deleted on exit; GC keeps everything it pins until then.

        Args:
            lifetime: Seconds (or a `timedelta`) the checkpoint lives without a refresh.
            name: A name shown by ``memwal checkpoint list``.
            refresh: Refresh it in the background while the block runs (False: it expires after
                ``lifetime`` whatever the block does).

        Returns:
            A `ManagedCheckpoint`; inside the block its ``scan(...)``, ``id`` and ``version``.

        Examples:
            >>> with t.checkpoint(lifetime=600) as cp:      # doctest: +SKIP
            ...     rows = cp.scan(filter="id < 100")       # the view of that moment, however long it takes
        """
        from memwal.checkpoint import ManagedCheckpoint
        from memwal.checkpoint import lifetime as check_lifetime

        return ManagedCheckpoint(self._table, lifetime=check_lifetime(lifetime), name=name, refresh=refresh)

    def checkpoints(self) -> list[Checkpoint]:
        """Every checkpoint of the table, live and expired (``memwal checkpoint list``).

        Returns:
            A list of `Checkpoint`: id, name, version, creation and expiry, the generations pinned.
        """
        from memwal.checkpoint import list_checkpoints

        return list_checkpoints(self._table)

    def history(self, *, limit: int = 20, job: str | None = None, since: str | float | None = None) -> History:
        """The table's job runs, newest first (``memwal history``).

        Args:
            limit: At most this many runs.
            job: Only this job's runs (``"merge"``, ``"gc"``, ...).
            since: Only runs started since: an ISO date or time (UTC unless it says otherwise),
                seconds since the epoch, or a duration back from now (``"90m"``, ``"24h"``, ``"7d"``).

        Returns:
            The `History`: ``.runs`` newest first; ``.to_dict()`` is ``memwal history --json``.
        """
        from memwal.history.timeline import history, parse_since

        return history(self._table, limit=limit, job=job, since=parse_since(since))

    def leases(self) -> list[LeaseInfo]:
        """The table's job leases (``memwal lease``).

        Returns:
            A `LeaseInfo` per job kind: its holder, run id, fencing token and expiry, or free.
        """
        from memwal.lease import list_leases

        return list_leases(self._table.store)

    def policy(self) -> TablePolicy:
        """The table's own maintenance policy (``memwal policy``): option values stored with the
        table, used by every job unless it is given the option.

        Returns:
            The `memwal.actions.policy.TablePolicy`: ``values`` as stored, ``invalid`` (not used) with why.
        """
        from memwal.actions.policy import table_policy

        return table_policy(self._table)

    def set_policy(self, *, set: dict[str, str] | None = None, unset: Sequence[str] = ()) -> TablePolicy:
        """Change the table's own maintenance policy (``memwal policy --set/--unset``): one commit of
        Lance's table config, none when nothing changes.

        Args:
            set: Option name to value, as the option takes it (``{"grace_seconds": "3600"}``,
                ``{"expire_versions": "never"}``): grace_seconds, expire_versions, writer_idle_seconds,
                history_retention, orphan_age_seconds, max_generations, max_rows, max_bytes.
            unset: Options that go back to memwal's default.

        Returns:
            The policy after the change.

        Raises:
            memwal.errors.BadInputError: An option a policy does not set, or a value its option
                refuses (nothing written).
        """
        from memwal.actions.policy import change_policy

        return change_policy(self._table, {k: str(v) for k, v in (set or {}).items()}, list(unset))

    def writers(self) -> list[WriterView]:
        """Each shard's writer as GC judges it (``memwal writers``): epoch, last write, live, said closed.

        Returns:
            A `memwal.table.writer.WriterView` per shard (``.to_dict()`` is an entry of ``memwal writers --json``).
        """
        from memwal.inspect.writers import writer_views

        return list(writer_views(self._table).values())

    def say_writers_closed(self, shards: Sequence[str]) -> list[ClosedWriter]:
        """Record that these shards' writers, as they are now, were closed (``memwal writers --closed
        SHARD --yes``): GC stops waiting the writer idle period for them (a closed writer looks like a
        quiet one on storage). Void for a writer that writes again, or a new writer.

        Args:
            shards: The shards whose writers were closed.

        Returns:
            The records written.

        Raises:
            memwal.errors.BadInputError: A shard the table does not have, or that no writer wrote
                (nothing written).
        """
        from memwal.inspect.writers import closing, say_closed

        records = closing(self._table, list(shards))
        say_closed(self._table, records)
        return records

    def merge_ops(self, *, set: dict[str, str] | None = None, unset: list[str] | None = None,
                  force: bool = False) -> MergeOpsChange:
        """Show (no arguments) or change the columns' merge operators (``memwal merge-ops``).

        Args:
            set: Column name to operator name, e.g. ``{"count": "sum"}``.
            unset: Columns whose operator is removed (last write wins again).
            force: Change the operators although generations are unmerged (their rows change meaning).

        Returns:
            The `MergeOpsChange`: the operators before and after.

        Raises:
            memwal.errors.BadInputError: An unknown column or operator, or unmerged generations
                without ``force`` (nothing written).
        """
        from memwal.actions.merge_ops import change_merge_ops

        return change_merge_ops(self._table, set_ops=set, unset=unset, force=force)


def open(uri: str, storage_options: dict[str, str] | None = None) -> MemWalTable:  # noqa: A001 - the API's name
    """Open a Lance table with a MemWAL.

    Args:
        uri: A local path, ``s3://bucket/prefix``, ``az://container/prefix`` (also ``abfss://``)
            or ``gs://bucket/prefix``.
        storage_options: Lance's storage options (its key names, e.g. ``aws_region``,
            ``azure_storage_account_name``); credentials here are never logged.

    Returns:
        The `MemWalTable`.

    Raises:
        memwal.errors.BadInputError: No table at ``uri``, a table without a MemWAL or a primary
            key, or a bad storage option; the message names what is wrong (exit code 2).
    """
    quiet_lance()  # before Lance loads (its log filter is read then)
    from memwal.store.options import check_storage_options
    from memwal.table import open_table

    return MemWalTable(open_table(uri, check_storage_options(storage_options)))
