"""Merge operators: columns that fold (sum, max, partial update) instead of being replaced.

A table declares an operator per column in its Lance config, ``memwal.merge-op.<column>``
(an UpdateConfig commit keeps the MemWAL index details). A column without a key is
``replace``: a table with no such key merges last-write-wins, exactly as before.

Folding is per key in LSM order: the base row first (generation 0), then generations
ascending, then row address. A tombstone clears the key; a put on an absent key takes the
row as it is; a put on a present key combines column by column:

=================================================  ==========================================
``replace``                                        the new value, null included
``sum``, ``min``, ``max``, ``bool_or``, ``bool_and``  combined ignoring nulls; null if both null
``last_non_null``                                  the new value unless it is null
``first_non_null``                                 the old value unless it is null
=================================================  ==========================================

Every operator is associative, so a sequence folds to the same value in any grouping: the
fold of a batch sorts row indices by key and order once, picks a row per key for the
positional operators (which therefore carry columns of any type) and aggregates the
arithmetic ones; folding the base row in is the same operation with the base row in front. The merger and
the reader both call :func:`fold`, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memwal.errors import BadInputError

CONFIG_PREFIX = "memwal.merge-op."
#: The field id of the column an operator was set on (see :func:`resolved_keys`).
FIELD_ID_PREFIX = "memwal.merge-op-field-id."

#: Each operator's ordered hash aggregation (pyarrow) and its options.
_AGGREGATES: dict[str, tuple[str, pc.FunctionOptions | None]] = {
    "replace": ("last", pc.ScalarAggregateOptions(skip_nulls=False)),
    "sum": ("sum", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    "min": ("min", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    "max": ("max", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    "bool_or": ("any", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    "bool_and": ("all", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    "last_non_null": ("last", pc.ScalarAggregateOptions(skip_nulls=True)),
    "first_non_null": ("first", pc.ScalarAggregateOptions(skip_nulls=True)),
}
OPERATORS = tuple(_AGGREGATES)


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _orderable(t: pa.DataType) -> bool:
    return (
        _numeric(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_temporal(t)
    )


#: Which column types each operator accepts (None: any type).
_ACCEPTS = {
    "sum": (_numeric, "numeric"),
    "min": (_orderable, "numeric, string or temporal"),
    "max": (_orderable, "numeric, string or temporal"),
    "bool_or": (pa.types.is_boolean, "boolean"),
    "bool_and": (pa.types.is_boolean, "boolean"),
}


@dataclass(frozen=True)
class MergeOps:
    """The operators of a table's columns; only non-``replace`` columns are stored."""

    ops: Mapping[str, str]

    @property
    def active(self) -> bool:
        """Whether any column folds (otherwise merges are plain last-write-wins)."""
        return any(op != "replace" for op in self.ops.values())

    def op(self, column: str) -> str:
        return self.ops.get(column, "replace")

    def folding_columns(self) -> list[str]:
        """Columns whose merged value depends on the base row's value."""
        return [c for c, op in self.ops.items() if op != "replace"]

    def to_dict(self) -> dict[str, str]:
        return dict(sorted(self.ops.items()))


NO_OPS = MergeOps({})


def from_config(config: Mapping[str, str], columns: Mapping[int, str] | None = None) -> MergeOps:
    """The operators recorded in a Lance table config (``ds.config()``).

    With ``columns`` (the table's field id -> column name), each operator applies to the
    column its recorded field id names now (:func:`resolved_keys`), as Lance itself tells a
    renamed column by its field id; without, to the column its key names.
    """
    ops = {k[len(CONFIG_PREFIX):]: v for k, v in config.items() if k.startswith(CONFIG_PREFIX)}
    for column, op in ops.items():
        if op not in _AGGREGATES:
            raise BadInputError(f"table config {CONFIG_PREFIX}{column}: unknown merge operator {op!r}")
    if columns is not None:
        resolved: dict[str, str] = {}
        for key, column in resolved_keys(config, columns).items():
            op = ops[key]
            if resolved.get(column, op) != op:
                raise BadInputError(f"column {column}: two merge operators apply ({resolved[column]} and {op}); "
                                    f"unset one with memwal merge-ops --unset")
            resolved[column] = op
        ops = resolved
    return MergeOps({c: op for c, op in ops.items() if op != "replace"})


def resolved_keys(config: Mapping[str, str], columns: Mapping[int, str], *, strict: bool = True) -> dict[str, str]:
    """Each operator key's column (key column -> current column name).

    An operator set by ``memwal merge-ops`` records the column's field id
    (``memwal.merge-op-field-id.<column>``): after ``alter_columns`` renamed the column it
    still applies to it, and it goes with the column when the column is dropped (a column
    re-added under the old name is a new column, with a new field id, and no operator).
    A key without a recorded field id (set by hand) names its column; when no column has
    that name any more it was renamed or dropped, and guessing which could sum a counter
    into the wrong column: refused (exit 2) with the way forward (``strict=False``: it
    names its column, so that ``memwal merge-ops --unset`` can remove it).
    """
    names = set(columns.values())
    out: dict[str, str] = {}
    for key in config:
        if not key.startswith(CONFIG_PREFIX):
            continue
        column = key[len(CONFIG_PREFIX):]
        raw = (config.get(FIELD_ID_PREFIX + column) or "").strip()
        if raw.isdigit():
            if int(raw) in columns:
                out[column] = columns[int(raw)]
        elif column in names or not strict:
            out[column] = column
        elif config[key] != "replace":
            raise BadInputError(
                f"table config {key}: merge operator {config[key]} for column {column}, which the table no longer "
                f"has (renamed or dropped); set the operator on the column's current name and unset this one: "
                f"memwal merge-ops TABLE --unset {column} [--set NEW_NAME={config[key]}] --force"
            )
    return out


def table_ops(ds) -> MergeOps:
    """The operators of one version of a Lance dataset, each on the column its field id names."""
    return from_config(ds.config(), {f.id(): f.name() for f in ds.lance_schema.fields()})


def validate(ops: Mapping[str, str], schema: pa.Schema, primary_key: list[str]) -> None:
    """Refuse an operator the column cannot take (exit 2), naming the column."""
    for column, op in ops.items():
        if op not in _AGGREGATES:
            known = ", ".join(OPERATORS)
            raise BadInputError(f"column {column}: unknown merge operator {op!r} (expected one of {known})")
        if column not in schema.names:
            raise BadInputError(f"column {column}: not in the table schema")
        if column in primary_key and op != "replace":
            raise BadInputError(f"column {column}: a primary-key column cannot have a merge operator")
        check = _ACCEPTS.get(op)
        ctype = schema.field(column).type
        if check and not check[0](ctype):
            raise BadInputError(f"column {column}: merge operator {op} needs a {check[1]} column, not {ctype}")


def _key_boundaries(t: pa.Table, primary_key: list[str]) -> np.ndarray:
    """Boolean array: row i starts a new key (rows sorted by key)."""
    n = t.num_rows
    starts = np.zeros(n, dtype=bool)
    if n == 0:
        return starts
    starts[0] = True
    for k in primary_key:
        col = t.column(k).combine_chunks()
        starts[1:] |= pc.not_equal(col.slice(1), col.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return starts


def fold(
    t: pa.Table,
    primary_key: list[str],
    ops: MergeOps,
    *,
    order: list[str],
    tombstone: str,
    carry: list[str] = (),
) -> tuple[pa.Table, pa.Table]:
    """Fold rows per key in ``order`` (ascending); returns ``(upserts, deleted_keys)``.

    ``t`` holds every version of the keys it covers, with a boolean ``tombstone`` column;
    a key whose last version is a tombstone is deleted, any other key becomes one row
    folding every put after its last tombstone. ``carry`` columns (e.g. the shard code)
    take their last value, in the upserts and in the deleted keys. Upserts keep
    ``t``'s non-internal columns in ``t``'s order; rows come in no particular order.
    """
    if t.num_rows == 0:
        return t, t.select([*primary_key, *carry])
    # Sort indices on the key and order columns only, never whole rows: rows are taken
    # once, and only the live ones.
    idx = pc.sort_indices(t.select([*primary_key, *order]),
                          sort_keys=[(k, "ascending") for k in primary_key] + [(c, "ascending") for c in order])
    idx = idx.to_numpy()
    starts = _key_boundaries(t.select(primary_key).take(pa.array(idx)), primary_key)
    group = np.cumsum(starts) - 1
    tomb = t.column(tombstone).fill_null(False).to_numpy()[idx]
    seen = np.cumsum(tomb)  # tombstones up to and including each row
    before_group = (seen - tomb)[starts]  # tombstones before each group's first row
    total = np.add.reduceat(tomb.astype(np.int64), np.flatnonzero(starts))
    within = seen - before_group[group]  # tombstones in this key up to this row
    ends = np.r_[np.flatnonzero(starts)[1:] - 1, t.num_rows - 1]
    deleted = tomb[ends]
    live = np.flatnonzero((within == total[group]) & ~tomb & ~deleted[group])
    deleted_keys = t.select([*primary_key, *carry]).take(pa.array(idx[ends[deleted]]))
    value_columns = [c for c in t.column_names
                     if c not in primary_key and c not in order and c != tombstone]
    columns = [c for c in t.column_names if c in primary_key or c in value_columns]
    # A key with one live row folds to that row (every operator of one value is the
    # value): only keys with several live rows are combined.
    single = np.bincount(group[live], minlength=len(ends))[group[live]] == 1
    singles = t.select(columns).take(pa.array(idx[live[single]]))
    several = live[~single]
    segment = t.select(columns).take(pa.array(idx[several]))
    folded = _combine(segment, group[several], primary_key, value_columns, ops, carry)
    return pa.concat_tables([singles, folded.select(columns).cast(singles.schema)]), deleted_keys


def _combine(segment: pa.Table, group: np.ndarray, primary_key: list[str], value_columns: list[str],
             ops: MergeOps, carry: list[str]) -> pa.Table:
    """One row per key of ``segment`` (rows sorted by key, then in fold order; ``group`` is
    each row's key number, non-decreasing).

    Positional operators take a row index per key (last, last non-null, first non-null)
    and then ``take`` the column, so they carry a column of any type (vectors, lists,
    structs, maps: pyarrow has no ordered hash aggregate for those). Only the arithmetic
    operators, whose column types :func:`validate` restricts to what pyarrow aggregates,
    go through a group-by, keyed by the key number so no key column is hashed again.
    """
    n = segment.num_rows
    if n == 0:
        return segment.select([*primary_key, *value_columns])
    first = np.r_[True, group[1:] != group[:-1]]
    starts = np.flatnonzero(first)
    last = pa.array(np.r_[starts[1:] - 1, n - 1])
    positions = np.arange(n, dtype=np.int64)
    out: dict[str, pa.ChunkedArray] = {k: segment.column(k).take(last) for k in primary_key}
    arithmetic = []
    for c in value_columns:
        op = "replace" if c in carry else ops.op(c)
        if op == "replace":
            out[c] = segment.column(c).take(last)
        elif op in ("last_non_null", "first_non_null"):
            valid = segment.column(c).is_valid().to_numpy(zero_copy_only=False)
            if op == "last_non_null":
                pick = np.maximum.reduceat(np.where(valid, positions, -1), starts)
                missing = pick < 0
            else:
                pick = np.minimum.reduceat(np.where(valid, positions, n), starts)
                missing = pick >= n
            out[c] = segment.column(c).take(pa.array(np.where(missing, 0, pick), mask=missing))
        else:
            arithmetic.append(c)
    if arithmetic:
        keyed = segment.select(arithmetic).append_column("__key", pa.array(np.cumsum(first) - 1))
        aggs = [(c, *_AGGREGATES[ops.op(c)]) for c in arithmetic]
        grouped = _rename(keyed.group_by("__key", use_threads=False).aggregate(aggs), aggs)
        order = pa.array(np.argsort(grouped.column("__key").to_numpy(), kind="stable"))
        for c in arithmetic:
            out[c] = grouped.column(c).take(order)
    return pa.table({c: out[c] for c in [*primary_key, *value_columns]})


def _rename(grouped: pa.Table, aggs: list[tuple]) -> pa.Table:
    """group_by names outputs ``<column>_<function>``: give the columns their names back."""
    names = {f"{c}_{name}": c for c, name, _ in aggs}
    return grouped.rename_columns([names.get(n, n) for n in grouped.column_names])


def table_merge_ops(table, version: int | None = None) -> MergeOps:
    """The operators a table declares at ``version`` (latest by default)."""
    return table_ops(table.dataset(version))
