"""The net change set of a merge batch: each key's newest version, split into upserts and deletes.

Newest means highest generation, then highest row address (spec: "LSM Tree Merging
Read"); a newest version with ``_tombstone = true`` deletes the key. Both engines produce
a :class:`NetChanges`; the local engine builds it here with pyarrow, hash-partitioning the
input through temporary Arrow IPC files when it is larger than one partition, so memory
stays bounded by the partition size rather than by the change set.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import lance
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from memwal.errors import BadInputError, MemWalError
from memwal.merge.plan import GenerationRef, MergePlan
from memwal.merge_ops import MergeOps, fold

log = logging.getLogger(__name__)

TOMBSTONE = "_tombstone"
ROWADDR = "_rowaddr"
GEN = "__gen"
SHARD = "__shard"
ORD = "__ord"
INTERNAL = (TOMBSTONE, ROWADDR, GEN, SHARD, ORD)


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

    @property
    def num_upserts(self) -> int:
        return sum(self.rows_upserted.values())

    @property
    def num_deletes(self) -> int:
        return self.delete_keys.num_rows

    def upsert_reader(self) -> pa.RecordBatchReader:
        return self.open_upserts()

    def close(self) -> None:
        """Remove whatever the engine staged; safe to call twice."""
        while self.cleanups:
            self.cleanups.pop()()


def empty_keys(schema: pa.Schema, primary_key: list[str]) -> pa.Table:
    return pa.table({k: pa.array([], schema.field(k).type) for k in primary_key})


def conform(batch: pa.RecordBatch | pa.Table, schema: pa.Schema, where: str) -> pa.Table:
    """Give a generation's rows the base table's schema (plus our internal columns).

    A generation written before a column was added lacks it: fill nulls. A generation
    with a column the base table lacks cannot be merged without losing it: refuse.
    """
    t = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    names = set(schema.names)
    extra = [c for c in t.column_names if c not in names and c not in INTERNAL]
    if extra:
        raise BadInputError(
            f"{where}: column(s) {', '.join(extra)} are not in the base table schema; "
            "add them to the base table before merging"
        )
    cols, fields = [], []
    for f in schema:
        if f.name in t.column_names:
            col = t.column(f.name)
            if not col.type.equals(f.type):
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise BadInputError(
                        f"{where}: column {f.name} has type {col.type}, base table has {f.type}"
                    ) from exc
        else:
            col = pa.nulls(t.num_rows, f.type)
        cols.append(col)
        fields.append(f)
    for name in INTERNAL:
        if name in t.column_names:
            cols.append(t.column(name))
            fields.append(pa.field(name, t.schema.field(name).type))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def read_generation(
    ref: GenerationRef,
    schema: pa.Schema,
    storage_options: dict | None,
    shard_code: int,
    batch_size: int = 65536,
    fragment_ids: list[int] | None = None,
) -> Iterator[pa.Table]:
    """Rows of one generation (or some of its fragments) tagged with row address, generation
    and ``shard_code``, the shard's position in :meth:`MergePlan.shard_ids` (a small integer
    is far cheaper to carry through sorts and group-bys than the shard's UUID string)."""
    try:
        ds = lance.dataset(ref.uri, storage_options=storage_options or None)
    except (ValueError, OSError) as exc:
        raise MemWalError(f"shard {ref.shard_id}: cannot open generation {ref.generation} at {ref.uri}: {exc}") from exc
    if TOMBSTONE not in ds.schema.names:
        raise BadInputError(f"{ref.uri}: generation has no {TOMBSTONE} column; not a MemWAL generation")
    if ref.wal_keys:
        yield _tag(conform(_operands(ref, ds, schema, storage_options), schema, ref.uri), ref, shard_code)
        return
    fragments = [ds.get_fragment(i) for i in fragment_ids] if fragment_ids is not None else None
    for batch in ds.scanner(with_row_address=True, batch_size=batch_size, fragments=fragments).to_batches():
        yield _tag(conform(batch, schema, ref.uri), ref, shard_code)


def _tag(t: pa.Table, ref: GenerationRef, shard_code: int) -> pa.Table:
    """A generation's rows with its generation number and the shard's code."""
    t = t.append_column(GEN, pa.array(np.full(t.num_rows, ref.generation, dtype=np.int64)))
    return t.append_column(SHARD, pa.array(np.full(t.num_rows, shard_code, dtype=np.int32)))


def _operands(ref: GenerationRef, ds: lance.LanceDataset, schema: pa.Schema, storage_options: dict | None) -> pa.Table:
    """Every operand of a generation from its WAL entries, checked against the flushed rows."""
    from memwal.merge.operands import check_complete, read_operands

    pk = [f.name for f in schema if (f.metadata or {}).get(b"lance-schema:unenforced-primary-key") == b"true"]
    operands = read_operands(ref.table_uri, storage_options, ref.wal_keys)
    check_complete(operands, ds.to_table(columns=[*pk, TOMBSTONE]), pk,
                   f"shard {ref.shard_id} generation {ref.generation}")
    return operands


def _refuse_cross_shard(g: pa.Table, primary_key: list[str]) -> None:
    """Keys are disjoint across shards (spec), so a key seen in two shards is a broken
    sharding invariant: refuse rather than pick one silently. ``g`` is a group-by with
    the min and max shard code per key."""
    bad = g.filter(pc.not_equal(g.column(f"{SHARD}_min"), g.column(f"{SHARD}_max")))
    if bad.num_rows:
        key = {k: bad.column(k)[0].as_py() for k in primary_key}
        raise MemWalError(f"primary key {key} was written to more than one shard; the sharding invariant is broken")


def dedupe(t: pa.Table, primary_key: list[str]) -> pa.Table:
    """Keep each key's newest row: highest generation, then highest row address."""
    if t.num_rows == 0:
        return t
    t = t.sort_by([(GEN, "ascending"), (ROWADDR, "ascending")])
    t = t.append_column(ORD, pa.array(np.arange(t.num_rows, dtype=np.int64)))
    g = t.group_by(primary_key, use_threads=True).aggregate([(ORD, "max"), (SHARD, "min"), (SHARD, "max")])
    _refuse_cross_shard(g, primary_key)
    return t.take(g.column(f"{ORD}_max"))


def base_rows_for_fold(table_uri: str, version: int, storage_options: dict | None, primary_key: list[str],
                       ops: MergeOps) -> pa.Table:
    """The base table's keys and folding columns at the plan's read version (generation 0
    of every fold). Only the columns whose merged value depends on the old one are read."""
    ds = lance.dataset(table_uri, version=version, storage_options=storage_options or None)
    return ds.to_table(columns=[*primary_key, *ops.folding_columns()])


def fold_changes(t: pa.Table, primary_key: list[str], ops: MergeOps, base: pa.Table) -> pa.Table:
    """The merge-operator counterpart of :func:`dedupe`: one row per key of ``t``, folded
    over the base row (when the key has one) and every version in LSM order; a key whose
    last version is a tombstone comes back as a tombstone row (key columns only)."""
    if t.num_rows == 0:
        return t
    g = t.group_by(primary_key, use_threads=True).aggregate([(SHARD, "min"), (SHARD, "max")])
    _refuse_cross_shard(g, primary_key)
    old = base.join(g.select(primary_key), primary_key, join_type="left semi")
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


def _partition_of(t: pa.Table, primary_key: list[str], partitions: int) -> np.ndarray:
    frame = t.select(primary_key).to_pandas()
    h = pd.util.hash_pandas_object(frame, index=False).to_numpy()
    return (h % np.uint64(partitions)).astype(np.int64)


def local_net_changes(
    plan: MergePlan,
    schema: pa.Schema,
    storage_options: dict | None = None,
    *,
    partition_rows: int = 2_000_000,
    tempdir: str | None = None,
) -> NetChanges:
    """Compute the net change set in-process, partitioned so memory stays bounded."""
    pk = plan.primary_key
    shard_ids = plan.shard_ids
    code_of = {sid: i for i, sid in enumerate(shard_ids)}
    partitions = max(1, -(-plan.total_rows // partition_rows))
    upsert_tables: list[pa.Table] = []
    upsert_files: list[str] = []

    def open_upserts() -> pa.RecordBatchReader:
        def batches() -> Iterator[pa.RecordBatch]:
            for t in upsert_tables:
                yield from t.to_batches()
            for path in upsert_files:
                with pa.memory_map(path) as src:
                    yield from pa.ipc.open_file(src).read_all().to_batches()

        return pa.RecordBatchReader.from_batches(schema, batches())

    net = NetChanges(schema=schema, primary_key=pk, delete_keys=empty_keys(schema, pk), open_upserts=open_upserts)
    delete_parts: list[pa.Table] = []
    reduce = reducer(plan, storage_options)

    def account(part: pa.Table) -> pa.Table:
        tomb = part.column(TOMBSTONE)
        dels = part.filter(tomb)
        ups = part.filter(pc.invert(tomb))
        net.rows_deleted.update(count_by_shard(dels.column(SHARD), shard_ids))
        net.rows_upserted.update(count_by_shard(ups.column(SHARD), shard_ids))
        delete_parts.append(dels.select(pk))
        return ups.select(schema.names).cast(schema)

    if partitions == 1:
        frames = [
            t for ref in plan.generations for t in read_generation(ref, schema, storage_options, code_of[ref.shard_id])
        ]
        if frames:
            upsert_tables.append(account(reduce(pa.concat_tables(frames, promote_options="permissive"))))
    else:
        workdir = tempfile.mkdtemp(prefix="memwal-merge-", dir=tempdir)
        net.cleanups.append(lambda: shutil.rmtree(workdir, ignore_errors=True))
        writers: dict[int, pa.ipc.RecordBatchFileWriter] = {}
        try:
            for ref in plan.generations:
                for t in read_generation(ref, schema, storage_options, code_of[ref.shard_id]):
                    pid = _partition_of(t, pk, partitions)
                    for p in np.unique(pid):
                        if p not in writers:
                            writers[p] = pa.ipc.new_file(os.path.join(workdir, f"in-{p}.arrow"), t.schema)
                        writers[p].write_table(t.filter(pa.array(pid == p)))
        finally:
            for w in writers.values():
                w.close()
        for p in sorted(writers):
            path = os.path.join(workdir, f"in-{p}.arrow")
            with pa.memory_map(path) as src:
                part = pa.ipc.open_file(src).read_all()
            os.unlink(path)
            out = os.path.join(workdir, f"up-{p}.arrow")
            with pa.ipc.new_file(out, schema) as w:
                w.write_table(account(reduce(part)))
            upsert_files.append(out)
        log.info("net change set built in %d partitions", partitions)
    if delete_parts:
        net.delete_keys = pa.concat_tables(delete_parts)
    return net
