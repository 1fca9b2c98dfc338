"""Scans: the rows a reader sees, at a plan's version, read again when what it listed moved.

:func:`open_plan` opens the base table at the plan's own version (a checkpoint's is older
than the latest) with the filter checked first; :func:`lsm_scan` reads through pylance's
``LsmScanner``, or the overlay when it pays (:mod:`memwal.read.overlay`), or folds (a table with
merge operators: :mod:`memwal.read.fold`);
:func:`fresh_scan` starts over when maintenance collected what a plan listed.
"""

from __future__ import annotations

import lance
import pyarrow as pa
from lance.mem_wal import LsmScanner, ShardSnapshot

from memwal.core import steps
from memwal.errors import BadInputError, MemWalError
from memwal.merge.ops import table_ops
from memwal.read.checks import check_columns, check_filter, reading
from memwal.read.fold import folded_scan
from memwal.read.overlay import overlay_scan
from memwal.read.plan import ReadPlan, plan_read
from memwal.table import Table
from memwal.table.manifest import TableManifest


def open_plan(table: Table, plan: ReadPlan | None, *, source: str = "index", filter: str | None = None,
              manifest: TableManifest | None = None) -> tuple[ReadPlan, lance.LanceDataset]:
    """The read's plan and the base table *at the plan's version* (a checkpoint's plan names
    an older version than the latest), the filter checked first."""
    if plan is not None:
        ds = table.dataset(plan.version)
        check_filter(ds, filter)
        return plan, ds
    manifest = manifest or table.require_mem_wal()
    ds = table.dataset(manifest.version)
    check_filter(ds, filter)
    return plan_read(table, source=source, filter=filter, manifest=manifest), ds


def lsm_scan(
    table: Table,
    *,
    columns: list[str] | None = None,
    filter: str | None = None,
    limit: int | None = None,
    snapshots: list[ShardSnapshot] | None = None,
    source: str = "manifests",
    manifest: TableManifest | None = None,
    plan: ReadPlan | None = None,
) -> pa.Table:
    """The rows a reader sees: base table merged with unmerged generations by primary key.

    A few small generations over a large base are read by :mod:`memwal.read.overlay` (the base
    less the keys they touch, plus their newest rows), the rest through pylance's ``LsmScanner``:
    :func:`memwal.read.overlay.overlay_pays` decides, as measured.

    A table with merge operators is folded here (pylance's ``LsmScanner`` is last write
    wins and would return wrong values for folding columns); ``snapshots`` must then be
    left to this function (or given as ``plan``), which needs the generations' paths.
    ``plan`` is a :func:`plan_read` already made for this read: the base table is read at
    its version. Bad input (a filter Lance refuses, an unknown column) raises
    :class:`BadInputError` before anything is read; a failed read, :class:`~memwal.errors.ReadError`.
    """
    with reading(table):
        if snapshots is not None and plan is None:
            manifest = manifest or table.require_mem_wal()
            ds = table.dataset(manifest.version)
            check_filter(ds, filter)
            listed = snapshots
        else:
            plan, ds = open_plan(table, plan, source=source, filter=filter, manifest=manifest)
            listed = snapshots if snapshots is not None else plan.snapshots
        check_columns(ds.schema, columns)
        ops = table_ops(ds)
        if ops.active:
            if plan is None:
                raise BadInputError(f"{table.uri}: a table with merge operators is read from its own plan, "
                                    "not snapshots")
            return folded_scan(table, ds, plan, ops, columns=columns, filter=filter, limit=limit)
        if snapshots is None and plan is not None:  # the plan's own generations: the overlay may read them
            rows = overlay_scan(table, ds, plan, columns=columns, filter=filter, limit=limit)
            if rows is not None:
                return rows
        scanner = LsmScanner.from_snapshots(ds, listed)
        if columns:
            scanner = scanner.project(columns)
        if filter:
            scanner = scanner.filter(filter)
        if limit is not None:
            scanner = scanner.limit(limit)
        return scanner.to_table()


def fresh_scan(
    table: Table,
    *,
    columns: list[str] | None = None,
    filter: str | None = None,
    limit: int | None = None,
    source: str = "index",
    plan: ReadPlan | None = None,
) -> tuple[ReadPlan, pa.Table]:
    """:func:`lsm_scan` at the latest version (of ``plan``, a first plan already made, or a
    fresh one), planned and read again when what the plan listed moved under the read.

    A merge followed by a GC (with no grace period) collects a generation a reader listed a
    moment earlier, and ``gc --expire-versions`` can expire the version it reads; pylance's
    reader then fails on a missing file. That is a race lost to maintenance, not bad input:
    when the table has a newer version than the one read, the read starts over (memwal.core.retry;
    after retries, exit code 3). A checkpoint's plan is not for this: its view is pinned.
    """
    from memwal.core.retry import after_conflict, vanished
    from memwal.errors import StateMovedError
    from memwal.merge.operands import OperandsIncompleteError

    def attempt(n: int) -> tuple[ReadPlan, pa.Table]:
        p = plan if n == 1 and plan is not None else None
        manifest = table.manifest(p.version) if p is not None else table.require_mem_wal()
        p = p or plan_read(table, source=source, filter=filter, manifest=manifest)
        steps.step("read.after-plan")
        try:
            return p, lsm_scan(table, columns=columns, filter=filter, limit=limit, plan=p, manifest=manifest)
        except (ValueError, OSError, RuntimeError, MemWalError) as exc:
            moved = isinstance(exc, StateMovedError | OperandsIncompleteError) or vanished(exc) \
                or vanished(exc.__cause__ or exc)
            if not moved or table.manifest().version == manifest.version:
                raise
            raise StateMovedError(f"{table.uri}: version {manifest.version} moved while read ({exc})") from exc

    return after_conflict(attempt, what=f"{table.uri}: scan")
