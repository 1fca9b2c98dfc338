"""Reads of a table with merge operators: base rows folded with every operand of the unmerged generations.

pylance's readers (``LsmScanner``, ``LsmPointLookupPlanner``, ``LsmVectorSearchPlanner``)
are last write wins: on a column with a merge operator they return the newest operand,
not the folded value. Here the rows a reader sees are computed by the merger's own fold
(:func:`memwal.merge.changes.fold_changes`) over the base rows and the generations'
operands (their WAL entries, :mod:`memwal.merge.operands`), so a read before a merge
equals the base table after it.

Only the columns a read needs are folded, and the base table's other columns are never
joined: keys are matched on the key columns alone and rows fetched with ``filter``
(:func:`memwal.merge.changes.key_mask`), so a column of any type (vectors, lists,
structs) is carried as it is. pyarrow's hash join refuses nested non-key columns, which
is how a table with a vector column failed every folded read before.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import TYPE_CHECKING

import lance
import pyarrow as pa

from memwal.merge.ops import MergeOps
from memwal.table.paths import generation_key

if TYPE_CHECKING:
    from memwal.read.plan import ReadPlan
    from memwal.table import Table


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def base_rows_for_keys(ds: lance.LanceDataset, keys: pa.Table, primary_key: list[str],
                       columns: list[str]) -> pa.Table:
    """The base table's rows of ``keys`` (absent keys give no row), through Lance's point
    lookup with no generation listed: typed keys, no SQL literal to build."""
    from lance.mem_wal import LsmPointLookupPlanner

    from memwal.read.keys import lookup_each

    schema = pa.schema([ds.schema.field(c) for c in columns])
    return lookup_each(LsmPointLookupPlanner(ds, [], primary_key), keys, primary_key, columns, schema)


def generation_operands(table: Table, ds: lance.LanceDataset, plan: ReadPlan, columns: list[str]) -> pa.Table | None:
    """Every operand (WAL entry row) of the plan's generations, conformed to the base schema,
    tagged for the fold, restricted to ``columns`` plus the fold's own columns."""
    from memwal.merge.columns import BaseFields, dataset_field_ids, renames
    from memwal.merge.model import GenerationRef
    from memwal.merge.operands import OperandsIncompleteError, wal_keys_by_generation
    from memwal.merge.read import INTERNAL, read_generation
    from memwal.table.generations import open_generation

    if not plan.generations:
        return None
    code_of = {sid: i for i, sid in enumerate(sorted({sid for sid, _, _ in plan.generations}))}
    wanted: dict[str, set[int]] = {}
    for sid, g, _ in plan.generations:
        wanted.setdefault(sid, set()).add(g)
    wal = {sid: wal_keys_by_generation(table.store, sid, gens) for sid, gens in wanted.items()}
    fields = BaseFields.of(ds)
    frames = []
    for sid, g, path in plan.generations:
        if not wal[sid][g]:
            raise OperandsIncompleteError(f"shard {sid} generation {g}: no WAL entry is left to fold its operands from")
        key = generation_key(sid, path)
        uri = table.store.uri_for(key)
        # Columns matched by field id, as the merger and pylance's LsmScanner match them.
        renamed = renames(dataset_field_ids(open_generation(uri, table.storage_options)), fields,
                          f"shard {sid} generation {g}")
        ref = GenerationRef(sid, g, path, key, uri, 0, 0, table.uri, wal[sid][g], renamed)
        for t in read_generation(ref, ds.schema, table.storage_options, code_of[sid]):
            frames.append(t.select([c for c in t.column_names if c in columns or c in INTERNAL]))
    return pa.concat_tables(frames, promote_options="permissive")


def folded_rows(table: Table, ds: lance.LanceDataset, plan: ReadPlan, ops: MergeOps, *,
                columns: list[str] | None = None, keys: pa.Table | None = None) -> pa.Table:
    """The live rows a reader sees (``columns``, all by default; only ``keys`` when given),
    folded by the table's merge operators. Rows come in no particular order."""
    from memwal.merge.changes import fold_changes, key_mask
    from memwal.merge.take import rows_but
    from memwal.table.schema import primary_key

    pk = primary_key(ds.lance_schema)
    wanted = _unique([*pk, *(columns if columns is not None else ds.schema.names)])
    schema = pa.schema([ds.schema.field(c) for c in wanted])
    base = ds.to_table(columns=wanted) if keys is None else base_rows_for_keys(ds, keys, pk, wanted)
    operands = generation_operands(table, ds, plan, wanted)
    if operands is not None and keys is not None:
        operands = operands.filter(pa.array(key_mask(operands, keys, pk)))
    if operands is None or operands.num_rows == 0:
        return base.cast(schema)
    # The fold needs the base value of folding columns only: a replaced column takes the
    # newest put, which every folded key has.
    folding = MergeOps({c: op for c, op in ops.ops.items() if c in wanted})
    # Every key with operands comes out of the fold, upserted or deleted: one mask splits
    # the base into the rows the fold starts from and the rows it leaves as they are.
    touched = key_mask(base, operands, pk)
    changes = fold_changes(operands, pk, folding,
                           base.filter(pa.array(touched)).select(_unique([*pk, *folding.folding_columns()])))
    untouched = rows_but(base, touched)
    return pa.concat_tables([t.select(wanted).cast(schema) for t in (untouched, changes.upserts)])


def folded_scan(
    table: Table,
    ds: lance.LanceDataset,
    plan: ReadPlan,
    ops: MergeOps,
    *,
    columns: list[str] | None = None,
    filter: str | None = None,
    limit: int | None = None,
) -> pa.Table:
    """Base rows folded with the plan's generations by the table's merge operators.

    The same fold as the merger (:func:`memwal.merge.changes.fold_changes`), so a read
    before a merge equals the base table after it. The filter applies to folded values,
    through Lance's own SQL on a scratch copy, so it means what it means everywhere else.
    """
    if filter is None:
        rows = folded_rows(table, ds, plan, ops, columns=columns)
        rows = rows.select(columns) if columns else rows
        return rows.slice(0, limit) if limit is not None else rows
    rows = folded_rows(table, ds, plan, ops)  # the filter may name any column
    scratch = tempfile.mkdtemp(prefix="memwal-fold-")
    try:
        folded = lance.write_dataset(rows, os.path.join(scratch, "rows.lance"))
        return folded.to_table(columns=columns, filter=filter, limit=limit)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
