"""The net change set of a merge batch: each key's newest version, split into upserts and deletes.

Newest means highest generation, then highest row address (spec: "LSM Tree Merging
Read"); a newest version with ``_tombstone = true`` deletes the key. Both engines produce
a :class:`NetChanges`; the local engine builds it here with pyarrow, hash-partitioning the
input through temporary Arrow IPC files when it is larger than one partition, so memory
stays bounded by the partition size rather than by the change set.

Where the local engine's time goes (measured, 2 cores): reading generations (a bounded
thread pool, results in plan order: :mod:`memwal.merge.read`), finding each key's newest row
(one hash pass over the keys, one ``take``), and Lance's ``merge_insert``. That last call is
handed a materialised table when the upserts fit a memory budget: at a 10M-row base a stream
cost 2.5x the memory and 1.3x the time of the same rows as one table.
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
from memwal.merge.model import MergePlan
from memwal.merge.ops import MergeOps, fold
from memwal.merge.read import GEN, ROWADDR, SHARD, TOMBSTONE

_ROW = "__row"


#: Rows per chunk of the upserts handed to merge_insert: Lance's batch size. Lance
#: accounts each batch it slices from a chunk at the whole chunk's buffer size, so larger
#: chunks exhaust merge_insert's 300 MB memory pool ("Resources exhausted ...
#: HashJoinInput") with a fraction of that in rows (observed: one 300k-row chunk failed,
#: the same rows in 8192-row chunks with buffers of their own pass).
TAKE_ROWS = 8192


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
    rows_upserted: Counter = field(default_factory=Counter)
    rows_deleted: Counter = field(default_factory=Counter)
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    #: The upserts as one in-memory table, set by an engine when they fit its memory
    #: budget; None means stream them (``open_upserts``).
    upsert_table: pa.Table | None = None

    @property
    def num_upserts(self) -> int:
        return sum(self.rows_upserted.values())

    @property
    def num_deletes(self) -> int:
        return self.delete_keys.num_rows

    def upsert_reader(self) -> pa.RecordBatchReader:
        return self.open_upserts()

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


def _refuse_cross_shard(g: pa.Table, primary_key: list[str]) -> None:
    """Keys are disjoint across shards (spec), so a key seen in two shards is a broken
    sharding invariant: refuse rather than pick one silently. ``g`` is a group-by with
    the min and max shard code per key."""
    bad = g.filter(pc.not_equal(g.column(f"{SHARD}_min"), g.column(f"{SHARD}_max")))
    if bad.num_rows:
        _cross_shard_error(bad, 0, primary_key)


def _cross_shard_error(t: pa.Table, row: int, primary_key: list[str]) -> NoReturn:
    key = {k: t.column(k)[row].as_py() for k in primary_key}
    raise MemWalError(f"primary key {key} was written to more than one shard; the sharding invariant is broken")


def key_codes(t: pa.Table, primary_key: list[str]) -> np.ndarray:
    """One int64 per row, equal exactly when the rows' keys are equal (nulls equal nulls).

    A single non-null integer key is its own code (no work); other keys are hashed once
    by Arrow (``dictionary_encode``) and several columns combined pairwise, re-coded
    whenever the product of cardinalities could overflow.
    """
    codes: np.ndarray | None = None
    card = 1
    for k in primary_key:
        col = t.column(k)
        if len(primary_key) == 1 and pa.types.is_integer(col.type) and col.null_count == 0:
            return col.to_numpy().astype(np.int64, copy=False)
        enc = pc.dictionary_encode(col, null_encoding="encode").combine_chunks()
        c = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        n = max(1, len(enc.dictionary))
        if codes is None:
            codes, card = c, n
            continue
        if card * n >= 2**62:
            codes, uniques = pd.factorize(codes)
            card = max(1, len(uniques))
        codes, card = codes * n + c, card * n
    return codes if codes is not None else np.zeros(t.num_rows, dtype=np.int64)


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


def dedupe(t: pa.Table, primary_key: list[str]) -> pa.Table:
    """Keep each key's newest row: highest generation, then highest row address."""
    if t.num_rows == 0:
        return t
    return t.take(pa.array(newest_rows(t, primary_key)))


def base_rows_for_fold(table_uri: str, version: int, storage_options: dict | None, primary_key: list[str],
                       ops: MergeOps) -> pa.Table:
    """The base table's keys and folding columns at the plan's read version (generation 0
    of every fold). Only the columns whose merged value depends on the old one are read."""
    ds = lance.dataset(table_uri, version=version, storage_options=storage_options or None)
    return ds.to_table(columns=[*primary_key, *ops.folding_columns()])


def rows_with_keys(t: pa.Table, keys: pa.Table, primary_key: list[str], *, anti: bool = False) -> pa.Array:
    """Indices of the rows of ``t`` whose key is (``anti``: is not) among ``keys``' keys, ascending.

    The join sees the key columns and a row number only, never ``t``'s other columns:
    pyarrow's hash join refuses non-key columns of nested types (a vector column would
    fail it), and carrying whole rows through a join is wasted work anyway. Rows are then
    fetched with one ``take``.
    """
    numbered = t.select(primary_key).append_column(_ROW, pa.array(np.arange(t.num_rows, dtype=np.int64)))
    found = numbered.join(keys.select(primary_key), primary_key, join_type="left anti" if anti else "left semi")
    return pa.array(np.sort(found.column(_ROW).to_numpy().astype(np.int64, copy=False)), pa.int64())


def fold_changes(t: pa.Table, primary_key: list[str], ops: MergeOps, base: pa.Table) -> pa.Table:
    """The merge-operator counterpart of :func:`dedupe`: one row per key of ``t``, folded
    over the base row (when the key has one) and every version in LSM order; a key whose
    last version is a tombstone comes back as a tombstone row (key columns only)."""
    if t.num_rows == 0:
        return t
    g = t.group_by(primary_key, use_threads=True).aggregate([(SHARD, "min"), (SHARD, "max")])
    _refuse_cross_shard(g, primary_key)
    old = base.take(rows_with_keys(base, g, primary_key))
    prefix = {TOMBSTONE: pa.array(np.zeros(old.num_rows, dtype=bool)),
              ROWADDR: pa.array(np.zeros(old.num_rows, dtype=np.uint64)),
              GEN: pa.array(np.zeros(old.num_rows, dtype=np.int64)),
              SHARD: pa.array(np.full(old.num_rows, -1, dtype=np.int32))}
    cols = [old.column(c) if c in old.column_names else prefix.get(c, pa.nulls(old.num_rows, t.schema.field(c).type))
            for c in t.column_names]
    old = pa.Table.from_arrays([c.cast(t.schema.field(n).type) for c, n in zip(cols, t.column_names, strict=True)],
                               schema=t.schema)
    both = pa.concat_tables([old, t])
    upserts, deleted = fold(both, primary_key, ops, order=[GEN, ROWADDR], tombstone=TOMBSTONE, carry=[SHARD])
    upserts = upserts.append_column(TOMBSTONE, pa.array(np.zeros(upserts.num_rows, dtype=bool)))
    gone = {c: deleted.column(c) if c in deleted.column_names
            else pa.nulls(deleted.num_rows, upserts.schema.field(c).type) for c in upserts.column_names}
    gone[TOMBSTONE] = pa.array(np.ones(deleted.num_rows, dtype=bool))
    return pa.concat_tables([upserts, pa.table(gone, schema=upserts.schema)])


def count_by_shard(codes: pa.Array | pa.ChunkedArray, shard_ids: list[str]) -> Counter:
    """Rows per shard id from a column of shard codes."""
    out: Counter = Counter()
    for item in pc.value_counts(codes).to_pylist():
        out[shard_ids[item["values"]]] += item["counts"]
    return out


def reducer(plan: MergePlan, storage_options: dict | None) -> Callable[[pa.Table], pa.Table]:
    """Each key's net version: the newest row (last write wins), or the fold of every
    version onto the base row when the table declares merge operators."""
    ops = MergeOps(plan.merge_ops)
    if not ops.active:
        return lambda t: dedupe(t, plan.primary_key)
    base = base_rows_for_fold(plan.table, plan.read_version, storage_options, plan.primary_key, ops)
    return lambda t: fold_changes(t, plan.primary_key, ops, base)
