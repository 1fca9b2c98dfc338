"""Point lookups by primary key over the LSM view, through pylance's ``LsmPointLookupPlanner``.

The planner reads the base table and the plan's generations newest first, stopping at
the first version of the key it finds (bloom filters and each generation's primary-key
index skip the rest), so a lookup costs a few small reads rather than a scan. It takes
one key per plan (observed with pylance 14.0.2: a two-row key array is refused), so a
lookup of several keys is one plan per key, in the order given.

A table with merge operators is folded instead (the planner is last write wins): the
keys' base rows and every operand of the plan's generations for those keys, through the
merger's own fold (:mod:`memwal.read.fold`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from memwal.errors import BadInputError
from memwal.read.keys import Keys, in_key_order, key_table, lookup_each

if TYPE_CHECKING:
    from memwal.read.plan import ReadPlan
    from memwal.table import Table


def lookup(table: Table, keys: Keys, *, columns: list[str] | None = None,
           plan: ReadPlan | None = None, source: str = "index") -> pa.Table:
    """The live rows of ``keys`` as a reader sees them, in the order given (a key that is
    absent or deleted gives no row). ``columns`` (default: all) are returned in that order;
    ``plan`` (a :func:`memwal.read.plan_read`, e.g. a checkpoint's) fixes the base-table
    version and the generations read."""
    from lance.mem_wal import LsmPointLookupPlanner

    from memwal.merge.ops import table_ops
    from memwal.read.checks import check_columns, reading
    from memwal.read.fold import folded_rows
    from memwal.read.scan import open_plan
    from memwal.table.schema import primary_key

    with reading(table):
        plan, ds = open_plan(table, plan, source=source)
        pk = primary_key(ds.lance_schema)
        if not pk:
            raise BadInputError(f"{table.uri}: the table declares no primary key")
        check_columns(ds.schema, columns)
        wanted = list(dict.fromkeys([*pk, *(columns if columns is not None else ds.schema.names)]))
        wanted_keys = key_table(keys, ds.schema, pk)
        schema = pa.schema([ds.schema.field(c) for c in wanted])
        ops = table_ops(ds)
        if ops.active:
            rows = folded_rows(table, ds, plan, ops, columns=wanted, keys=wanted_keys)
            rows = in_key_order(rows, wanted_keys, pk)
        else:
            rows = lookup_each(LsmPointLookupPlanner(ds, plan.snapshots, pk), wanted_keys, pk, wanted, schema)
        return rows.select(columns) if columns is not None else rows
