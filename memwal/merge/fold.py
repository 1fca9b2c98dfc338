"""Folding a batch of versions by the table's merge operators (:mod:`memwal.merge.ops`).

Per key in LSM order: the base row first (generation 0), then generations ascending, then
row address. The merger (:func:`memwal.merge.changes.fold_changes`) and the folded reader
(:mod:`memwal.read.fold`) both call :func:`fold`, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memwal.merge.keys import key_codes, stable_order
from memwal.merge.ops import AGGREGATES, MergeOps
from memwal.merge.take import chunked_indices, take_rows


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
    carry: Sequence[str] = (),
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
    if base is not None and nb:
        keys = pa.concat_tables([base.select(primary_key).cast(keys.schema), keys])
    codes = key_codes(keys, primary_key)
    idx = _fold_order(t, nb, codes, order)
    codes = codes[idx]
    starts = np.r_[True, codes[1:] != codes[:-1]]
    from_t = idx >= nb  # a row of t, not a base row
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
    keys = pa.table({"__key": codes, "__src": np.arange(len(codes)) >= nb,
                     **{f"__o{i}": pa.concat_arrays([pa.nulls(nb, t.schema.field(c).type),
                                                     t.column(c).combine_chunks()]) for i, c in enumerate(order)}})
    ordered: np.ndarray = pc.sort_indices(keys, sort_keys=[(c, "ascending") for c in keys.column_names]).to_numpy()
    return ordered


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
        aggs = [(c, *AGGREGATES[ops.op(c)]) for c in arithmetic]
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


def _rename(grouped: pa.Table, aggs: list[tuple[str, str, pc.FunctionOptions | None]]) -> pa.Table:
    """group_by names outputs ``<column>_<function>``: give the columns their names back."""
    names = {f"{c}_{name}": c for c, name, _ in aggs}
    return grouped.rename_columns([names.get(n, n) for n in grouped.column_names])
