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
from memwal.merge.keys import key_codes, stable_order
from memwal.merge.take import chunked_indices, take_rows

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


def _narrow_folding(t: pa.Table, base: pa.Table | None, columns: list[str]) -> pa.Table:
    """The folding ``columns`` of ``base``'s rows followed by ``t``'s, one chunk per column
    (a column the base rows lack is null there)."""
    def part(c: str) -> pa.Array:
        ctype = t.schema.field(c).type
        if base is None:
            return pa.array([], ctype)
        if c in base.column_names:
            return base.column(c).cast(ctype).combine_chunks()
        return pa.nulls(base.num_rows, ctype)

    return pa.table({c: pa.concat_arrays([part(c), t.column(c).combine_chunks()]) for c in columns})


class NotUniformError(ValueError):
    """A key whose rows disagree on a column that must have one value per key."""

    def __init__(self, column: str, row: int) -> None:
        super().__init__(f"{column} differs within a key (row {row})")
        self.column, self.row = column, row


def fold(
    t: pa.Table,
    primary_key: list[str],
    ops: MergeOps,
    *,
    order: list[str],
    tombstone: str,
    carry: list[str] = (),
    uniform: str | None = None,
    base: pa.Table | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Fold rows per key in ``order`` (ascending); returns ``(upserts, deleted_keys)``.

    ``t`` holds every version of the keys it covers, with a boolean ``tombstone`` column;
    a key whose last version is a tombstone is deleted, any other key becomes one row
    folding every put after its last tombstone. ``base`` rows (key columns and some
    folding columns, one row per key, no tombstones) come before every row of ``t``: the
    base table's current rows, folded into without being widened to ``t``'s columns; a
    base key with no row in ``t`` gives nothing. ``carry`` columns (e.g. the shard code)
    take their last value, in the upserts and in the deleted keys; the ``uniform`` column
    must hold one value per key in ``t`` (:class:`NotUniformError` names a row that
    breaks it). Upserts keep ``t``'s non-internal columns in ``t``'s order; rows come in
    no particular order.

    Why it is shaped so: everything per key is decided on narrow columns (keys, order,
    tombstone, the folding columns), and ``t``'s other columns are taken once, one row
    per upserted key, in ascending row order: a key's replaced columns are always those
    of its last row, which is a put of ``t``. Taking wide rows (a vector column) more
    than once, from many chunks and in key order, was most of a folding merge's extra
    time (issue 23); a take in row order costs half of one in key order.
    """
    value_columns = [c for c in t.column_names
                     if c not in primary_key and c not in order and c != tombstone]
    columns = [c for c in t.column_names if c in primary_key or c in value_columns]
    if t.num_rows == 0:
        return t.select(columns), t.select([*primary_key, *carry])
    nb = 0 if base is None else base.num_rows
    n = nb + t.num_rows
    keys = t.select(primary_key)
    if nb:
        keys = pa.concat_tables([base.select(primary_key).cast(keys.schema), keys])
    source = np.r_[np.zeros(nb, dtype=bool), np.ones(t.num_rows, dtype=bool)]
    codes = key_codes(keys, primary_key)
    idx = _fold_order(t, nb, codes, order)
    codes = codes[idx]
    starts = np.r_[True, codes[1:] != codes[:-1]]
    from_t = source[idx]
    if uniform is not None:
        _check_uniform(t, uniform, idx - nb, starts, from_t)
    group = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    ends = np.r_[first[1:] - 1, n - 1]
    tomb = np.r_[np.zeros(nb, dtype=bool), t.column(tombstone).fill_null(False).to_numpy()][idx]
    seen = np.cumsum(tomb)  # tombstones up to and including each row
    within = seen - (seen - tomb)[first][group]  # tombstones in this key up to this row
    deleted = tomb[ends]
    in_t = from_t[ends]  # a base key with no version in t is not folded
    deleted_keys = take_rows(t.select([*primary_key, *carry]), np.sort(idx[ends[deleted]] - nb))
    # A put after the key's last tombstone is live; a kept key's last row is live and a put of t.
    live = np.flatnonzero((within == within[ends][group]) & ~tomb & ~deleted[group] & in_t[group])
    kept = np.flatnonzero(~deleted & in_t)
    rows = idx[ends[kept]] - nb
    by_row = np.argsort(rows)  # row numbers are distinct: no stable sort needed
    kept, rows = kept[by_row], rows[by_row]
    upserts = take_rows(t.select(columns), rows)
    folding = [c for c in value_columns if c not in carry and ops.op(c) != "replace"]
    several = np.bincount(group[live], minlength=len(ends))[kept] > 1
    if not folding or not several.any():
        return upserts, deleted_keys
    # Only keys with several live rows are combined (every operator of one value is the value).
    combined = np.zeros(len(ends), dtype=bool)
    combined[kept[several]] = True
    segment_rows = live[combined[group[live]]]
    segment = _narrow_folding(t, base, folding).take(pa.array(idx[segment_rows]))
    folded = _combine(segment, group[segment_rows], folding, ops)  # in ascending key number
    rank = np.cumsum(combined) - 1
    pick = np.arange(len(kept))
    pick[several] = len(kept) + rank[kept[several]]
    for c in folding:
        field = upserts.schema.field(c)
        merged = pa.concat_arrays([upserts.column(c).combine_chunks(),
                                   folded.column(c).cast(field.type).combine_chunks()])
        upserts = upserts.set_column(upserts.schema.get_field_index(c), field, merged.take(chunked_indices(pick)))
    return upserts, deleted_keys


def _fold_order(t: pa.Table, nb: int, codes: np.ndarray, order: list[str]) -> np.ndarray:
    """Row numbers of ``nb`` base rows followed by ``t``'s, sorted by key, then base rows
    first, then ``order``.

    A stable sort of the key codes alone (base rows come first in the numbering) is that
    order whenever each key's rows of ``t`` already come in ``order``, which is how the
    engines read them (generations ascending, rows in file order); checked on the sorted
    rows, O(n), and only otherwise sorted on every column (Arrow).
    """
    idx = stable_order(codes)
    rows = idx - nb
    same = (codes[idx][1:] == codes[idx][:-1]) & (rows[1:] >= 0) & (rows[:-1] >= 0)
    try:
        later, tie = np.zeros(len(same), dtype=bool), np.ones(len(same), dtype=bool)
        for c in order:
            v = t.column(c).to_numpy()[np.maximum(rows, 0)]
            later |= tie & (v[1:] > v[:-1])
            tie &= v[1:] == v[:-1]
        if np.all(later | tie | ~same):
            return idx
    except (pa.ArrowInvalid, TypeError):  # an order column NumPy cannot compare (nulls, nested)
        pass
    keys = pa.table({"__key": codes, "__src": np.r_[np.zeros(nb, dtype=bool), np.ones(t.num_rows, dtype=bool)],
                     **{f"__o{i}": pa.concat_arrays([pa.nulls(nb, t.schema.field(c).type),
                                                     t.column(c).combine_chunks()]) for i, c in enumerate(order)}})
    return pc.sort_indices(keys, sort_keys=[(c, "ascending") for c in keys.column_names]).to_numpy()


def _check_uniform(t: pa.Table, column: str, rows: np.ndarray, starts: np.ndarray, from_t: np.ndarray) -> None:
    """Raise :class:`NotUniformError` when two rows of ``t`` of one key (``rows``: row
    numbers in key order, ``starts``: where each key begins) differ in ``column``."""
    values = t.column(column).to_numpy()[np.where(from_t, rows, 0)]
    both = from_t[1:] & from_t[:-1] & ~starts[1:]
    bad = np.flatnonzero(both & (values[1:] != values[:-1]))
    if len(bad):
        raise NotUniformError(column, int(rows[bad[0] + 1]))


def _combine(segment: pa.Table, group: np.ndarray, columns: list[str], ops: MergeOps) -> pa.Table:
    """One value per key of each folding column of ``segment`` (rows sorted by key, then in
    fold order; ``group`` is each row's key number, non-decreasing).

    Positional operators take a row index per key (last non-null, first non-null) and then
    ``take`` the column, so they carry a column of any type (vectors, lists, structs,
    maps: pyarrow has no ordered hash aggregate for those). Arithmetic on integers and
    booleans, and sums of floats, are NumPy ``reduceat`` over the sorted runs
    (:func:`_reduce_runs`); only the rest (strings, temporal and decimal columns, float
    minima and maxima, whose NaN rules are Arrow's) go through an Arrow group-by, keyed
    by the key number so no key column is hashed again.
    """
    n = segment.num_rows
    first = np.r_[True, group[1:] != group[:-1]]
    starts = np.flatnonzero(first)
    positions = np.arange(n, dtype=np.int64)
    out: dict[str, pa.ChunkedArray] = {}
    arithmetic = []
    for c in columns:
        op = ops.op(c)
        if op in ("last_non_null", "first_non_null"):
            valid = segment.column(c).is_valid().to_numpy(zero_copy_only=False)
            if op == "last_non_null":
                pick = np.maximum.reduceat(np.where(valid, positions, -1), starts)
                missing = pick < 0
            else:
                pick = np.minimum.reduceat(np.where(valid, positions, n), starts)
                missing = pick >= n
            out[c] = segment.column(c).take(pa.array(np.where(missing, 0, pick), mask=missing))
        elif (reduced := _reduce_runs(segment.column(c), op, starts)) is not None:
            out[c] = reduced
        else:
            arithmetic.append(c)
    if arithmetic:
        keyed = segment.select(arithmetic).append_column("__key", pa.array(np.cumsum(first) - 1))
        aggs = [(c, *_AGGREGATES[ops.op(c)]) for c in arithmetic]
        grouped = _rename(keyed.group_by("__key", use_threads=False).aggregate(aggs), aggs)
        order = pa.array(np.argsort(grouped.column("__key").to_numpy(), kind="stable"))
        for c in arithmetic:
            out[c] = grouped.column(c).take(order)
    return pa.table({c: out[c] for c in columns})


#: The NumPy ufunc whose ``reduceat`` folds each arithmetic operator over a run of values.
_RUNS = {"sum": np.add, "min": np.minimum, "max": np.maximum, "bool_or": np.logical_or, "bool_and": np.logical_and}


def _reduce_runs(column: pa.ChunkedArray, op: str, starts: np.ndarray) -> pa.Array | None:
    """``op`` over each run of ``column`` beginning at ``starts``, ignoring nulls (a run of
    nulls gives null), typed as Arrow's hash aggregate types it (sums of integers are
    int64 or uint64, of floats double); None where Arrow's own rules are needed."""
    ctype = column.type
    if op not in _RUNS or not (pa.types.is_integer(ctype) or pa.types.is_boolean(ctype)
                               or (op == "sum" and pa.types.is_floating(ctype))):
        return None
    values = column.combine_chunks()
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    if op == "sum":
        out_type = pa.float64() if pa.types.is_floating(ctype) else \
            pa.uint64() if pa.types.is_unsigned_integer(ctype) else pa.int64()
        neutral = 0
    elif pa.types.is_boolean(ctype):
        out_type, neutral = ctype, op == "bool_and"
    else:
        out_type = ctype
        info = np.iinfo(ctype.to_pandas_dtype())
        neutral = info.max if op == "min" else info.min
    dtype = out_type.to_pandas_dtype()
    raw = values.fill_null(pa.scalar(neutral, ctype) if op != "sum" else pa.scalar(0, ctype))
    reduced = _RUNS[op].reduceat(raw.to_numpy(zero_copy_only=False).astype(dtype, copy=False), starts)
    empty = np.add.reduceat(valid.astype(np.int64), starts) == 0
    return pa.array(reduced, out_type, mask=empty)


def _rename(grouped: pa.Table, aggs: list[tuple]) -> pa.Table:
    """group_by names outputs ``<column>_<function>``: give the columns their names back."""
    names = {f"{c}_{name}": c for c, name, _ in aggs}
    return grouped.rename_columns([names.get(n, n) for n in grouped.column_names])


def table_merge_ops(table, version: int | None = None) -> MergeOps:
    """The operators a table declares at ``version`` (latest by default)."""
    return table_ops(table.dataset(version))
