"""The net change set of a merge batch: each key's newest version, split into upserts and deletes.

Newest means highest generation, then highest row address (spec: "LSM Tree Merging
Read"); a newest version with ``_tombstone = true`` deletes the key. Both engines produce
a :class:`NetChanges`; the local engine builds it here with pyarrow, hash-partitioning the
input through temporary Arrow IPC files when it is larger than one partition, so memory
stays bounded by the partition size rather than by the change set.

Where the local engine's time goes (measured, 2 cores): reading generations (a bounded
thread pool, results in plan order), finding each key's newest row (one hash pass over the
keys, one ``take``), and Lance's ``merge_insert``. That last call is handed a materialised
table when the upserts fit a memory budget: at a 10M-row base a stream cost 2.5x the memory
and 1.3x the time of the same rows as one table.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NoReturn, TypeVar

import lance
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from memwal.errors import BadInputError, MemWalError, first_line
from memwal.merge.columns import arrow_field_ids, dataset_field_ids, to_base_names
from memwal.merge.inputs import open_generation
from memwal.merge.ops import MergeOps, fold
from memwal.merge.plan import GenerationRef, MergePlan
from memwal.table.generations import GenerationUnreadableError

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

TOMBSTONE = "_tombstone"
ROWADDR = "_rowaddr"
GEN = "__gen"
SHARD = "__shard"
ORD = "__ord"
INTERNAL = (TOMBSTONE, ROWADDR, GEN, SHARD, ORD)
_ROW = "__row"

#: Upserts up to this size (Arrow buffer bytes) go to ``merge_insert`` as one table.
DEFAULT_MEMORY_BUDGET = 512 * 1024 * 1024
#: Change rows deduped in one pass; more are hash-partitioned through temporary files.
#: Partitioning bounds memory but costs about a third more time, so it starts only where
#: a single pass would need several GiB (at the benchmark's ~100-byte rows, 5M change rows
#: take about as much memory in one pass as the single-pass floor itself).
DEFAULT_PARTITION_ROWS = 8_000_000
#: Rows per chunk of the upserts handed to merge_insert: Lance's batch size. Lance
#: accounts each batch it slices from a chunk at the whole chunk's buffer size, so larger
#: chunks exhaust merge_insert's 300 MB memory pool ("Resources exhausted ...
#: HashJoinInput") with a fraction of that in rows (observed: one 300k-row chunk failed,
#: the same rows in 8192-row chunks with buffers of their own pass).
TAKE_ROWS = 8192
#: Generations read at once. Reads are mostly waiting on storage and Lance's own
#: decoding, which release the GIL: 8 threads read 140 local generations in 0.32 s
#: instead of 0.52 s on 2 cores, and hide the latency of object stores.
READ_THREADS = 8


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


def _open_checked(ref: GenerationRef, storage_options: dict | None) -> lance.LanceDataset:
    try:
        ds = open_generation(ref.uri, storage_options)
    except (ValueError, OSError) as exc:
        raise GenerationUnreadableError(ref.shard_id, ref.generation,
                                        f"cannot open {ref.uri}: {first_line(exc)}") from exc
    if TOMBSTONE not in ds.schema.names:
        raise BadInputError(f"{ref.uri}: generation has no {TOMBSTONE} column; not a MemWAL generation")
    return ds


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
    ds = _open_checked(ref, storage_options)
    if ref.wal_keys:
        yield _tag(conform(_operands(ref, ds, schema, storage_options), schema, ref.uri), ref, shard_code)
        return
    fragments = [ds.get_fragment(i) for i in fragment_ids] if fragment_ids is not None else None
    scanner = ds.scanner(with_row_address=True, batch_size=batch_size, fragments=fragments)
    for batch in _attributed(ref, scanner.to_batches()):
        yield _tag(conform(to_base_names(pa.Table.from_batches([batch]), ref.renamed), schema, ref.uri), ref,
                   shard_code)


@contextmanager
def _reading(ref: GenerationRef) -> Iterator[None]:
    """Lance reading one generation: a failure names the shard, the generation and Lance's
    reason (:class:`GenerationUnreadableError`), so the merge stops that shard there and
    merges the others."""
    try:
        yield
    except BaseException as exc:  # noqa: BLE001 - pyo3 panics derive from BaseException
        if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
            raise
        raise GenerationUnreadableError(ref.shard_id, ref.generation,
                                        f"unreadable: {ref.uri}: {first_line(exc)}") from exc


def _attributed(ref: GenerationRef, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches`` of one generation, read under :func:`_reading` (what the consumer does
    with each batch is not attributed to the generation)."""
    batches = iter(batches)
    while True:
        with _reading(ref):
            batch = next(batches, None)
        if batch is None:
            return
        yield batch


def ordered_pool(fn: Callable[[T], R], items: Sequence[T], threads: int) -> Iterator[R]:
    """``map(fn, items)`` on a pool of ``threads``, results in ``items`` order, with at most
    ``2 * threads`` calls in flight: memory holds a bounded window ahead of the consumer."""
    if threads <= 1 or len(items) <= 1:
        yield from map(fn, items)
        return
    todo = iter(items)
    pending: deque[Future] = deque()
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="memwal-read") as pool:
        try:
            for item in todo:
                pending.append(pool.submit(fn, item))
                if len(pending) >= 2 * threads:
                    break
            while pending:
                done = pending.popleft().result()
                nxt = next(todo, _END)
                if nxt is not _END:
                    pending.append(pool.submit(fn, nxt))
                yield done
        finally:
            for f in pending:  # a failed or abandoned read: start nothing more
                f.cancel()


_END = object()


def read_generations(
    refs: Sequence[GenerationRef],
    schema: pa.Schema,
    storage_options: dict | None,
    code_of: dict[str, int],
    *,
    threads: int = READ_THREADS,
    group_rows: int = 1_000_000,
) -> Iterator[pa.Table]:
    """The tagged rows of ``refs`` in order (as :func:`read_generation` gives them), read
    by a bounded thread pool and handed out several generations per table.

    Conforming and tagging cost a few Python calls per table: done per generation, they
    were most of the time of a merge of 10,000 tiny generations. Here consecutive
    generations with one schema (up to ``group_rows`` rows) are concatenated first and
    conformed once, and their generation and shard columns built in one go.
    """
    if any(ref.wal_keys for ref in refs):  # merge operators: operands come from WAL entries
        for tables in ordered_pool(
                lambda ref: list(read_generation(ref, schema, storage_options, code_of[ref.shard_id])), refs, threads):
            yield from tables
        return

    def scan(ref: GenerationRef) -> tuple[GenerationRef, pa.Table]:
        ds = _open_checked(ref, storage_options)
        with _reading(ref):
            return ref, ds.scanner(with_row_address=True, batch_size=65536).to_table()

    group: list[tuple[GenerationRef, pa.Table]] = []

    def flush() -> pa.Table:
        t = conform(to_base_names(pa.concat_tables([g[1] for g in group]), group[0][0].renamed), schema,
                    group[0][0].uri)
        counts = [g[1].num_rows for g in group]
        gens = np.repeat(np.array([g[0].generation for g in group], dtype=np.int64), counts)
        shards = np.repeat(np.array([code_of[g[0].shard_id] for g in group], dtype=np.int32), counts)
        group.clear()
        return t.append_column(GEN, pa.array(gens)).append_column(SHARD, pa.array(shards))

    rows = 0
    size = max(1, min(64, len(refs) // (threads * 8)))  # a future per tiny generation costs more than its read
    chunks = [refs[i:i + size] for i in range(0, len(refs), size)]
    scanned = (item for part in ordered_pool(lambda chunk: [scan(r) for r in chunk], chunks, threads) for item in part)
    for ref, t in scanned:
        same = t.schema.equals(group[0][1].schema) and ref.renamed == group[0][0].renamed if group else True
        if group and (not same or rows + t.num_rows > group_rows):
            yield flush()
            rows = 0
        group.append((ref, t))
        rows += t.num_rows
    if group:
        yield flush()


def _tag(t: pa.Table, ref: GenerationRef, shard_code: int) -> pa.Table:
    """A generation's rows with its generation number and the shard's code."""
    t = t.append_column(GEN, pa.array(np.full(t.num_rows, ref.generation, dtype=np.int64)))
    return t.append_column(SHARD, pa.array(np.full(t.num_rows, shard_code, dtype=np.int32)))


def _operands(ref: GenerationRef, ds: lance.LanceDataset, schema: pa.Schema, storage_options: dict | None) -> pa.Table:
    """Every operand of a generation from its WAL entries, checked against the flushed rows."""
    from memwal.merge.operands import OperandsIncompleteError, check_complete, read_operands

    pk = [f.name for f in schema if (f.metadata or {}).get(b"lance-schema:unenforced-primary-key") == b"true"]
    # A WAL entry names its columns as its writer did and records their field ids: each is
    # named as in the flushed generation (same field ids), then as in the base table.
    names_by_id = {fid: name for name, fid in dataset_field_ids(ds).items()}

    def as_generation(t: pa.Table) -> pa.Table:
        ids = arrow_field_ids(t.schema)
        return t.rename_columns([names_by_id.get(ids[c], c) if c in ids else c for c in t.column_names])

    where = f"shard {ref.shard_id} generation {ref.generation}"
    try:
        operands = read_operands(ref.table_uri, storage_options, ref.wal_keys, as_generation)
        operands = to_base_names(operands, ref.renamed)
        with _reading(ref):
            flushed = to_base_names(ds.to_table(columns=[*pk, TOMBSTONE]), ref.renamed)
        check_complete(operands, flushed, pk, where)
    except OperandsIncompleteError as exc:  # this shard stops here (or re-plans: merged meanwhile)
        detail = str(exc).removeprefix(f"{where}: ")
        raise GenerationUnreadableError(ref.shard_id, ref.generation, f"operands-missing: {detail}") from exc
    return operands


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


def _partition_of(t: pa.Table, primary_key: list[str], partitions: int) -> np.ndarray:
    frame = t.select(primary_key).to_pandas()
    h = pd.util.hash_pandas_object(frame, index=False).to_numpy()
    return (h % np.uint64(partitions)).astype(np.int64)


def split_newest(t: pa.Table, schema: pa.Schema, primary_key: list[str], shard_ids: list[str]
                 ) -> tuple[pa.Table, pa.Table, Counter, Counter]:
    """Last write wins, straight from row indices: ``(upserts, delete_keys, upserted per
    shard, deleted per shard)``, with one ``take`` of the upserts' columns (in TAKE_ROWS
    chunks) and one of the deleted keys, rather than deduping whole rows and then
    filtering them twice."""
    idx = newest_rows(t, primary_key)
    tomb = t.column(TOMBSTONE).fill_null(False).to_numpy()[idx]
    shard = t.column(SHARD).to_numpy()[idx]
    ups, dels = idx[~tomb], idx[tomb]

    def per_shard(codes: np.ndarray) -> Counter:
        counts = np.bincount(codes, minlength=len(shard_ids))
        return Counter({shard_ids[i]: int(n) for i, n in enumerate(counts) if n})

    upserts = t.select(schema.names).take(_chunked_indices(ups)).cast(schema)
    deletes = t.select(primary_key).take(_chunked_indices(dels))
    return upserts, deletes, per_shard(shard[~tomb]), per_shard(shard[tomb])


def _chunked_indices(idx: np.ndarray) -> pa.ChunkedArray:
    """Take indices in TAKE_ROWS chunks: Arrow then gives each output chunk buffers of its
    own (one pass, and faster than a single take)."""
    return pa.chunked_array([pa.array(idx[i:i + TAKE_ROWS], pa.int64()) for i in range(0, len(idx), TAKE_ROWS)],
                            type=pa.int64())


def _own_chunks(t: pa.Table) -> pa.Table:
    """``t`` with chunks of at most TAKE_ROWS rows, each with buffers of its own (copied
    only when a chunk is larger; see TAKE_ROWS for why)."""
    if all(len(b) <= TAKE_ROWS for b in t.to_batches()):
        return t
    return t.take(_chunked_indices(np.arange(t.num_rows)))


def _table_bytes(tables: list[pa.Table], files: list[str]) -> int:
    """Arrow buffer bytes of the upserts: in memory, or in uncompressed IPC files."""
    return sum(t.get_total_buffer_size() for t in tables) + sum(os.path.getsize(f) for f in files)


def _read_ipc(path: str) -> pa.Table:
    with pa.memory_map(path) as src:
        return pa.ipc.open_file(src).read_all()


def local_net_changes(
    plan: MergePlan,
    schema: pa.Schema,
    storage_options: dict | None = None,
    *,
    partition_rows: int = DEFAULT_PARTITION_ROWS,
    tempdir: str | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    read_threads: int = READ_THREADS,
) -> NetChanges:
    """Compute the net change set in-process, partitioned so memory stays bounded.

    Upserts of at most ``memory_budget`` bytes are handed over as one table
    (:attr:`NetChanges.upsert_table`); larger ones stay where they are and are streamed.
    """
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
                yield from _read_ipc(path).to_batches()

        return pa.RecordBatchReader.from_batches(schema, batches())

    net = NetChanges(schema=schema, primary_key=pk, delete_keys=empty_keys(schema, pk), open_upserts=open_upserts)
    delete_parts: list[pa.Table] = []
    ops = MergeOps(plan.merge_ops)
    reduce = reducer(plan, storage_options) if ops.active else None

    def account(part: pa.Table) -> pa.Table:
        if reduce is None:
            ups, dels, n_up, n_del = split_newest(part, schema, pk, shard_ids)
            net.rows_upserted.update(n_up)
            net.rows_deleted.update(n_del)
            delete_parts.append(dels)
            return ups
        part = reduce(part)
        tomb = part.column(TOMBSTONE)
        dels = part.filter(tomb)
        ups = part.filter(pc.invert(tomb))
        net.rows_deleted.update(count_by_shard(dels.column(SHARD), shard_ids))
        net.rows_upserted.update(count_by_shard(ups.column(SHARD), shard_ids))
        delete_parts.append(dels.select(pk))
        return ups.select(schema.names).cast(schema)

    def frames() -> Iterator[pa.Table]:
        return read_generations(plan.generations, schema, storage_options, code_of, threads=read_threads)

    if partitions == 1:
        read = list(frames())
        if read:
            upsert_tables.append(account(pa.concat_tables(read, promote_options="permissive")))
        del read
    else:
        workdir = tempfile.mkdtemp(prefix="memwal-merge-", dir=tempdir)
        net.cleanups.append(lambda: shutil.rmtree(workdir, ignore_errors=True))
        writers: dict[int, pa.ipc.RecordBatchFileWriter] = {}
        try:
            for t in frames():
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
            part = _read_ipc(path)
            os.unlink(path)
            out = os.path.join(workdir, f"up-{p}.arrow")
            with pa.ipc.new_file(out, schema) as w:
                w.write_table(account(part))
            del part
            upsert_files.append(out)
        log.info("net change set built in %d partitions", partitions)
    if delete_parts:
        net.delete_keys = pa.concat_tables(delete_parts)
    size = _table_bytes(upsert_tables, upsert_files)
    if (upsert_tables or upsert_files) and size <= memory_budget:
        net.upsert_table = _own_chunks(pa.concat_tables([*upsert_tables, *map(_read_ipc, upsert_files)]))
    else:
        log.info("upserts of %d MiB exceed the %d MiB memory budget: streamed", size >> 20, memory_budget >> 20)
    return net
