"""The net change set of a merge batch: each key's newest version, split into upserts and deletes.

Newest means highest generation, then highest row address (spec: "LSM Tree Merging
Read"); a newest version with ``_tombstone = true`` deletes the key; with merge operators
the versions fold instead (:func:`fold_changes`). Every engine reduces with :func:`reducer`,
so engines cannot disagree. Engines that commit through the driver hand over a
:class:`NetChanges` (delete keys, and upserts as a stream or, when they fit the engine's
memory budget, as one table for ``merge_insert``: docs/decisions/0003-merge-insert-gets-a-table.md);
the local engine builds it with pyarrow, hash-partitioning the input through temporary
Arrow IPC files past one partition, so memory follows the partition size, not the change set.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

import lance
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from memwal.errors import MemWalError
from memwal.merge.fold import NotUniformError, fold
from memwal.merge.keys import IntKeySet, int_key, key_codes
from memwal.merge.model import MergePlan
from memwal.merge.ops import MergeOps
from memwal.merge.read import GEN, ROWADDR, SHARD, TOMBSTONE
from memwal.merge.take import take_rows

_ROW = "__row"

#: Rows per batch of the base scan for a fold's base rows.
SCAN_BATCH_ROWS = 131072


@dataclass
class NetChanges:
    """What one merge batch does to the base table, however an engine computed it.

    ``delete_keys`` holds only key columns (small); upserts are streamed from wherever the
    engine left them (temporary files, a staging dataset) through ``open_upserts``.
    """

    schema: pa.Schema
    primary_key: list[str]
    delete_keys: pa.Table
    open_upserts: Callable[[], pa.RecordBatchReader]
    rows_upserted: Counter[str] = field(default_factory=Counter)
    rows_deleted: Counter[str] = field(default_factory=Counter)
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    #: The upserts as one in-memory table, set by an engine when they fit its memory
    #: budget; None means stream them (``open_upserts``).
    upsert_table: pa.Table | None = None

    @property
    def num_upserts(self) -> int:
        return sum(self.rows_upserted.values())

    @property
    def num_deletes(self) -> int:
        return int(self.delete_keys.num_rows)

    def upsert_data(self) -> pa.Table | pa.RecordBatchReader:
        """What ``merge_insert`` gets: the materialised table when there is one (Lance
        then plans the join knowing the input's size), else the stream."""
        return self.upsert_table if self.upsert_table is not None else self.open_upserts()

    def close(self) -> None:
        """Remove whatever the engine staged; safe to call twice."""
        while self.cleanups:
            self.cleanups.pop()()


def empty_keys(schema: pa.Schema, primary_key: list[str]) -> pa.Table:
    return pa.table({k: pa.array([], schema.field(k).type) for k in primary_key})


def no_changes(schema: pa.Schema, primary_key: list[str]) -> NetChanges:
    """The change set of a batch whose data is all in the base already: the marker alone."""
    return NetChanges(schema=schema, primary_key=primary_key, delete_keys=empty_keys(schema, primary_key),
                      open_upserts=lambda: pa.RecordBatchReader.from_batches(schema, iter(())))


def _cross_shard_error(t: pa.Table, row: int, primary_key: list[str]) -> NoReturn:
    key = {k: t.column(k)[row].as_py() for k in primary_key}
    raise MemWalError(f"primary key {key} was written to more than one shard; the sharding invariant is broken")


def _in_lsm_order(t: pa.Table) -> bool:
    """Whether rows already come in LSM order within each shard (shards contiguous,
    generation then row address ascending): how the engines read them, so the newest row
    of a key is its last one and no sort is needed. Checked, not assumed: O(n), no copy."""
    if t.num_rows < 2:
        return True
    shard = t.column(SHARD).to_numpy()
    gen = t.column(GEN).to_numpy()
    addr = t.column(ROWADDR).to_numpy()
    same = shard[1:] == shard[:-1]
    if np.count_nonzero(~same) != len(np.unique(shard[np.r_[True, ~same]])) - 1:
        return False  # a shard's rows come in more than one run
    later = (gen[1:] > gen[:-1]) | ((gen[1:] == gen[:-1]) & (addr[1:] > addr[:-1]))
    return bool(np.all(later | ~same))


def newest_rows(t: pa.Table, primary_key: list[str]) -> np.ndarray:
    """Row indices of each key's newest version (highest generation, then row address),
    refusing a key written to two shards.

    One hash pass over the key codes (``duplicated(keep="last")``) on rows in LSM order;
    rows that are not in that order are first ordered by an index sort on (generation, row
    address) only. The cross-shard check hashes only the survivors of each shard.
    """
    if t.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    order = None
    if not _in_lsm_order(t):
        order = pc.sort_indices(t.select([SHARD, GEN, ROWADDR]),
                                sort_keys=[(SHARD, "ascending"), (GEN, "ascending"), (ROWADDR, "ascending")])
        order = order.to_numpy()
    codes = key_codes(t, primary_key)
    shard = t.column(SHARD).to_numpy()
    if order is not None:
        codes, shard = codes[order], shard[order]
    runs = np.r_[0, np.flatnonzero(shard[1:] != shard[:-1]) + 1, len(codes)]
    kept = np.concatenate([
        a + np.flatnonzero(~pd.Series(codes[a:b]).duplicated(keep="last").to_numpy())
        for a, b in zip(runs[:-1], runs[1:], strict=True)
    ])
    if len(runs) > 2:
        # One run per shard: a key written to two shards survived in both.
        dup = pd.Series(codes[kept]).duplicated(keep=False).to_numpy()
        if dup.any():
            first = kept[np.flatnonzero(dup)[0]]
            _cross_shard_error(t, int(order[first] if order is not None else first), primary_key)
    return order[kept] if order is not None else kept


def base_rows_for_fold(ds: lance.LanceDataset, keys: pa.Table, primary_key: list[str], ops: MergeOps) -> pa.Table:
    """The base table's rows (keys and folding columns only) whose keys are among ``keys``':
    generation 0 of their folds. Only the columns whose merged value depends on the old one
    are read.

    A single integer key is matched batch by batch as the scan goes (:class:`IntKeySet`),
    so only the matching rows are ever held, not every key of the base (docs/decisions/0018).
    Other keys are read whole and matched by one join (:func:`key_mask`).
    """
    columns = [*primary_key, *ops.folding_columns()]
    wanted = int_key(keys, primary_key)
    if wanted is None:
        rows = ds.to_table(columns=columns)
        return rows.filter(pa.array(key_mask(rows, keys, primary_key)))
    among = IntKeySet(wanted, ds.count_rows())

    def matching(batch: pa.RecordBatch) -> np.ndarray:
        values = int_key(batch, primary_key)
        if values is None:  # a null key (a damaged base) is no key of the change set
            return key_mask(pa.Table.from_batches([batch]), keys, primary_key)
        return among.contains(values)

    scanner = ds.scanner(columns=columns, batch_size=SCAN_BATCH_ROWS)
    kept = [b.filter(pa.array(matching(b))) for b in scanner.to_batches()]
    return pa.Table.from_batches(kept, schema=scanner.projected_schema)


def key_mask(t: pa.Table, keys: pa.Table, primary_key: list[str]) -> np.ndarray:
    """Whether each row of ``t`` has its key among ``keys``' keys.

    A key of one integer column on both sides is matched as integers (:class:`IntKeySet`), a key
    of one column of another type by Arrow's hash set (``is_in``). Other keys go through a join
    that sees the key columns and a row number only, never ``t``'s other columns: pyarrow's hash
    join refuses non-key columns of nested types (a vector column would fail it), and carrying
    whole rows through a join is wasted work. A mask lets callers fetch the rows with
    ``filter``, which, unlike a ``take``, costs no more across Lance's many small batches than
    within one.
    """
    values, wanted = int_key(t, primary_key), int_key(keys, primary_key)
    if values is not None and wanted is not None:
        return IntKeySet(wanted, len(values)).contains(values)
    if len(primary_key) == 1 and t.column(primary_key[0]).type.equals(keys.column(primary_key[0]).type):
        # one column of another type (a string): Arrow's hash set, no join (a null key matches
        # nothing, as in the join)
        column = keys.column(primary_key[0])
        values_set = column.combine_chunks() if column.num_chunks else pa.array([], column.type)
        hits = pc.is_in(t.column(primary_key[0]), value_set=values_set, skip_nulls=True).fill_null(False)
        found_mask: np.ndarray = hits.to_numpy(zero_copy_only=False).astype(bool, copy=False)
        return found_mask
    numbered = t.select(primary_key).append_column(_ROW, pa.array(np.arange(t.num_rows, dtype=np.int64)))
    found = numbered.join(keys.select(primary_key), primary_key, join_type="left semi")
    mask = np.zeros(t.num_rows, dtype=bool)
    mask[found.column(_ROW).to_numpy()] = True
    return mask


@dataclass(frozen=True)
class Reduced:
    """A batch of versions reduced to one per key: the upserted rows (every column of the
    batch but the fold's order and tombstone, with the shard code) and the deleted keys
    (key columns and shard code). Kept apart, never concatenated and filtered again: each
    wide row is gathered exactly once."""

    upserts: pa.Table
    deletes: pa.Table


def newest_versions(t: pa.Table, primary_key: list[str]) -> Reduced:
    """Last write wins: each key's newest row, split into upserts and deleted keys."""
    idx = newest_rows(t, primary_key)
    tomb = t.column(TOMBSTONE).fill_null(False).to_numpy()[idx]
    columns = [c for c in t.column_names if c not in (GEN, ROWADDR, TOMBSTONE)]
    return Reduced(take_rows(t.select(columns), idx[~tomb]), take_rows(t.select([*primary_key, SHARD]), idx[tomb]))


def fold_changes(t: pa.Table, primary_key: list[str], ops: MergeOps, base: pa.Table) -> Reduced:
    """The merge-operator counterpart of :func:`newest_versions`: one row per key of ``t``,
    folded over its ``base`` row (when it has one) and every version in LSM order.

    ``base`` holds the base rows of ``t``'s keys (:func:`base_rows_for_fold`). A row of
    another key gives nothing but costs its place in the fold's sort, so a caller holding
    the whole base narrows it first (:func:`memwal.read.fold.folded_rows`)."""
    try:
        upserts, deleted = fold(t, primary_key, ops, order=[GEN, ROWADDR], tombstone=TOMBSTONE, carry=[SHARD],
                                uniform=SHARD, base=base)
    except NotUniformError as exc:  # keys are disjoint across shards (spec)
        _cross_shard_error(t, exc.row, primary_key)
    return Reduced(upserts, deleted)


def count_by_shard(codes: pa.Array | pa.ChunkedArray, shard_ids: list[str]) -> Counter[str]:
    """Rows per shard id from a column of shard codes."""
    out: Counter[str] = Counter()
    for item in pc.value_counts(codes).to_pylist():
        out[shard_ids[item["values"]]] += item["counts"]
    return out


def reducer(plan: MergePlan, storage_options: dict[str, str] | None) -> Callable[[pa.Table], Reduced]:
    """Each key's net version: the newest row (last write wins), or the fold of every
    version onto the base row when the table declares merge operators.

    A fold's base rows are read per call, for the keys of the rows it is given: one scan
    of the key and folding columns per partition (local engine) or task (Spark), each
    keeping only its keys' rows, instead of the whole base held by every one of them."""
    ops = MergeOps(plan.merge_ops)
    pk = list(plan.primary_key)
    if not ops.active:
        return lambda t: newest_versions(t, pk)
    ds = lance.dataset(plan.table, version=plan.read_version, storage_options=storage_options or None)
    return lambda t: fold_changes(t, pk, ops, base_rows_for_fold(ds, t, pk, ops))
