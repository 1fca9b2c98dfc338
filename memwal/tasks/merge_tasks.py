"""The tasks' half of a distributed merge (Spark, Ray): what a task gets and what it does with it.

Two shapes of task (the engine's merge chooses: :mod:`memwal.spark.engine.merge`, :mod:`memwal.ray.merge`):

* **by shard** (:func:`shard_tasks`, :func:`reduce_shards`): whole shards per task. A
  primary key is written to one shard only (MemWAL spec: "rows from different shards do not
  need deduplication"), so a task that holds every generation of its shards holds every
  version of its keys: it reads, reduces and writes them with no shuffle at all. It also
  returns a 64-bit hash of each net key, so the driver can check that no key crossed tasks
  (a broken sharding invariant) before anything is committed.
* **keyed shuffle** (:func:`read_tasks`, :func:`read_buckets`, :func:`reduce_buckets`):
  generations packed by bytes, rows hash-partitioned by key into Arrow IPC blobs, one reduce
  task per partition. It takes any batch: shards too large for one task, many rows, or a
  suspected broken invariant, which it then names exactly.

Both end in :func:`reduce_and_write`: the local engine's own reducer
(:func:`memwal.merge.changes.reducer`), then the upserts written as Lance fragments of the
write target. The driver path's target is a staging dataset; the driverless path's is the
base table itself, and the task then also finds the base rows of its net keys at the plan's
read version (:func:`memwal.merge.base_rows.base_addresses`) and sends their offsets, keyed
by base fragment, to the retire stage (:func:`retire_fragments`: one task per group of
fragments, so each base fragment gets exactly one deletion file).

Every stage yields rows of one schema (:data:`ROW_SCHEMA`: a partition key, a kind, text and
bytes) that the engine's stages carry from task to task (Spark's DataFrames, Ray's objects):
``rows`` (a shuffle bucket's change rows, IPC), ``doc`` (a reduce task's document and its key
hashes), ``offsets`` (a base fragment's retired rows), ``retired`` (deletion files written) and
``spent`` (a task's seconds by phase, what accumulators counted on RDDs).

A job's staging folder is *closed* (:func:`close`) before the driver removes what its failed or
duplicate tasks wrote: a task checks the mark before it writes and again after its receipt,
and a task that finds it removes its own files. Over Spark Connect the client cannot wait for a
stopped job's tasks to end (nor can Ray's driver for a task it cancelled), so this is what
keeps a late task's files from outliving the job.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import lance
import numpy as np
import pandas as pd
import pyarrow as pa

from memwal.errors import MemWalError
from memwal.merge.base_rows import base_addresses, by_fragment, merge_offsets, retire
from memwal.merge.changes import count_by_shard, reducer
from memwal.merge.driverless import data_file_keys, deletion_file_key, remove_uncommitted
from memwal.merge.local import partition_of
from memwal.merge.model import GenerationRef, MergePlan
from memwal.merge.read import SHARD, read_generation, read_generations
from memwal.store import open_store
from memwal.table import Table

#: Threads each task reads its generations with (tasks already run side by side).
TASK_READ_THREADS = 4
#: A generation as a task is sent it: ``dataclasses.asdict`` of its :class:`GenerationRef`.
Payload = dict[str, Any]
#: A read item: a generation and the fragments to read (None: all of them).
Item = tuple[Payload, list[int] | None]
#: The table's storage options, as every task is sent them.
Options = dict[str, str]
#: A stage's row: ``(part, kind, text, blob)`` (module docstring); ``part`` is the partition a
#: later stage's ``repartitionById`` sends it to (a bucket, a base fragment's id, else 0).
Row = tuple[int, str, str, bytes]
ROW_SCHEMA = pa.schema([("part", pa.int32()), ("kind", pa.string()), ("text", pa.string()), ("blob", pa.binary())])
ROWS, DOC, OFFSETS, RETIRED, SPENT = "rows", "doc", "offsets", "retired", "spent"


def batch(rows: list[Row]) -> pa.RecordBatch:
    """Rows of a stage as one Arrow batch of :data:`ROW_SCHEMA`."""
    cols: list[Sequence[Any]] = list(zip(*rows, strict=True)) if rows else [[], [], [], []]
    return pa.RecordBatch.from_arrays([pa.array(c, t) for c, t in zip(cols, ROW_SCHEMA.types, strict=True)],
                                      schema=ROW_SCHEMA)


def rows_of(batches: Iterable[pa.RecordBatch]) -> Iterator[Row]:
    """A stage's input rows back as tuples."""
    for b in batches:
        yield from zip(*(b.column(i).to_pylist() for i in range(4)), strict=True)


class Spent(dict[str, float]):
    """One task's seconds by phase, sent to the driver as a ``spent`` row."""

    def add(self, phase: str, seconds: float) -> None:
        self[phase] = self.get(phase, 0.0) + seconds

    def row(self) -> Row:
        return 0, SPENT, json.dumps(self), b""


def ref_bytes(ref: GenerationRef) -> int:
    """A generation's size for task sizing; the manifest's in-memory size, else a row estimate."""
    return ref.bytes or ref.rows * 128


def _ref(payload: Payload) -> GenerationRef:
    return GenerationRef(**{**payload, "wal_keys": tuple(payload["wal_keys"])})


# --------------------------------------------------------------------------- by shard


def shard_tasks(plan: MergePlan, task_bytes: int, shard_max_bytes: int,
                parallelism: int) -> list[list[Payload]] | None:
    """Whole shards packed into tasks: at least ``min(shards, parallelism)`` tasks, more when the
    batch is larger than that many ``task_bytes``; each shard to the least loaded task, the
    largest first. A task's generations stay in plan order (a shard's are ascending and
    contiguous, the order the reducer expects). None when one shard's change set is larger
    than ``shard_max_bytes``: it would not fit one task, so the batch takes the keyed shuffle."""
    sizes = {s.shard_id: sum(ref_bytes(g) for g in s.generations) for s in plan.shards}
    if not sizes or max(sizes.values()) > shard_max_bytes:
        return None
    total = sum(sizes.values())
    count = min(len(sizes), max(parallelism, -(-total // task_bytes)))
    loads = [0] * count
    owner: dict[str, int] = {}
    for shard_id in sorted(sizes, key=lambda s: -sizes[s]):
        i = loads.index(min(loads))
        owner[shard_id] = i
        loads[i] += sizes[shard_id]
    tasks: list[list[Payload]] = [[] for _ in range(count)]
    for s in plan.shards:
        tasks[owner[s.shard_id]] += [asdict(g) for g in s.generations]
    return [t for t in tasks if t]


def reduce_shards(payloads: list[Payload], plan: MergePlan, schema: pa.Schema, options: Options,
                  target: Target) -> Iterator[Row]:
    """One by-shard task: its shards' generations read whole (as the local engine reads them),
    reduced and written (:func:`reduce_and_write`, with the net keys' hashes)."""
    spent = Spent()
    started = time.perf_counter()
    code_of = {sid: i for i, sid in enumerate(plan.shard_ids)}
    frames = list(read_generations([_ref(p) for p in payloads], schema, options, code_of, threads=TASK_READ_THREADS))
    spent.add("read", time.perf_counter() - started)
    if frames:
        yield from reduce_and_write(pa.concat_tables(frames, promote_options="permissive"), plan, schema, options,
                                    target, spent, with_key_hashes=True)
    yield spent.row()


def key_hashes(t: pa.Table, primary_key: list[str]) -> np.ndarray:
    """A 64-bit hash per row of its key columns, the same in every process (pandas' fixed
    hash key): equal keys hash equal, so keys shared by two tasks show as a shared hash."""
    hashes: np.ndarray = pd.util.hash_pandas_object(
        t.select(primary_key).to_pandas(), index=False).to_numpy()
    return hashes


def keys_disjoint(task_hashes: list[bytes]) -> bool:
    """Whether no net key hash (:func:`key_hashes`, as each by-shard task sent them) came from
    two tasks: a sort and a neighbour compare."""
    hashes = np.sort(np.concatenate([np.frombuffer(h, dtype=np.uint64) for h in task_hashes] or
                                    [np.zeros(0, np.uint64)]))
    return not np.any(hashes[1:] == hashes[:-1])


# --------------------------------------------------------------------------- keyed shuffle


def read_tasks(refs: list[GenerationRef], task_bytes: int, options: Options) -> list[list[Item]]:
    """Pack generations into read tasks of about ``task_bytes``, in plan order.

    Whole generations are packed together; one larger than a task is split by fragment
    (opening only that generation), except when its operands come from its WAL entries,
    which are read whole.
    """
    tasks: list[list[Item]] = []
    current: list[Item] = []
    size = 0
    for ref in refs:
        payload, n = asdict(ref), ref_bytes(ref)
        if n > task_bytes and not ref.wal_keys:
            frags = [f.fragment_id for f in lance.dataset(ref.uri, storage_options=options or None).get_fragments()]
            per = max(1, len(frags) * task_bytes // n)
            tasks += [[(payload, frags[i : i + per])] for i in range(0, len(frags), per)]
            continue
        if current and size + n > task_bytes:
            tasks.append(current)
            current, size = [], 0
        current.append((payload, None))
        size += n
    if current:
        tasks.append(current)
    return tasks


def read_buckets(
    items: list[Item], schema: pa.Schema, options: Options, shard_ids: list[str], pk: list[str], parts: int
) -> Iterator[Row]:
    """One read task: its rows, tagged like the local engine's, as one IPC blob per bucket
    (``rows`` rows whose ``part`` is the bucket), then its ``spent`` row.

    Whole generations are read as the local engine reads them (:func:`read_generations`:
    a bounded thread pool, consecutive generations conformed and tagged together); a part
    of a large generation is read by its fragments.
    """
    started = time.perf_counter()
    code_of = {sid: i for i, sid in enumerate(shard_ids)}
    refs = [(_ref(payload), fragment_ids) for payload, fragment_ids in items]
    frames = list(read_generations([r for r, f in refs if f is None], schema, options, code_of,
                                   threads=TASK_READ_THREADS))
    for ref, fragment_ids in refs:
        if fragment_ids is not None:
            frames += read_generation(ref, schema, options, code_of[ref.shard_id], fragment_ids=fragment_ids)
    if frames:
        t = pa.concat_tables(frames, promote_options="permissive")
        bucket = partition_of(t, pk, parts)
        order = np.argsort(bucket, kind="stable")
        t, bucket = t.take(pa.array(order)), bucket[order]
        edges = np.flatnonzero(np.diff(bucket)) + 1
        for start, end in zip(np.r_[0, edges], np.r_[edges, len(bucket)], strict=True):
            yield int(bucket[start]), ROWS, "", ipc(t.slice(start, end - start))
    spent = Spent()
    spent.add("read", time.perf_counter() - started)
    yield spent.row()


def reduce_buckets(rows: Iterable[Row], plan: MergePlan, schema: pa.Schema, options: Options,
                   target: Target) -> Iterator[Row]:
    """One reduce task of the shuffle: every blob of its bucket, reduced and written; the read
    tasks' other rows (their ``spent``) pass through."""
    spent = Spent()
    tables = []
    for row in rows:
        if row[1] == ROWS:
            tables.append(pa.ipc.open_stream(row[3]).read_all())
        else:
            yield row
    if tables:
        yield from reduce_and_write(pa.concat_tables(tables, promote_options="permissive"), plan, schema, options,
                                    target, spent)
    yield spent.row()


def ipc(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    blob: bytes = sink.getvalue().to_pybytes()
    return blob


# --------------------------------------------------------------------------- both


@dataclass(frozen=True)
class Target:
    """Where a task writes its upserts (``uri``: a staging dataset, or the base table), the table
    (``table``) and the job's folder under it (``folder``, a store key: the staging dataset, or
    the driverless tasks' receipts of the files they wrote into the table, so that what a failed
    job or a retried task attempt wrote is found and removed) and, driverless, the table version
    whose base rows the batch retires (``retire_at``)."""

    uri: str
    table: str
    folder: str
    retire_at: int | None = None


#: The mark of a closed job folder (:func:`close`): no task of the job may leave files after it.
CLOSED = "closed"


class JobClosed(MemWalError):
    """A task of a merge job that already ended (its folder closed) wrote nothing, or removed what it wrote."""


def close(table: Table, folder: str) -> None:
    """Close a job's folder: from now on its tasks write nothing (and remove what they wrote)."""
    table.store.put(f"{folder}/{CLOSED}", b"")


def _check_open(target: Target, options: Options) -> None:
    """A task's first check before it writes: nothing is written for a job that ended."""
    if open_store(target.table, options).exists(f"{target.folder}/{CLOSED}"):
        raise JobClosed(f"merge job folder {target.folder} is closed: its job ended")


def _written(target: Target, options: Options, keys: list[str]) -> None:
    """``keys`` (store keys under the table) were just written: listed in a receipt of the job's
    folder (driverless), then, if the job ended meanwhile, removed again by this task."""
    if not keys:
        return
    store = open_store(target.table, options)
    if target.retire_at is not None:
        store.put(f"{target.folder}/{uuid.uuid4().hex}.json", json.dumps(keys).encode())
    if store.exists(f"{target.folder}/{CLOSED}"):  # after the receipt: the driver's cleanup saw one or the other
        if target.retire_at is not None:
            remove_uncommitted(Table(target.table, dict(options)), keys)
        else:
            store.delete_many(keys)
        raise JobClosed(f"merge job folder {target.folder} closed while a task wrote: its files removed")


def reduce_and_write(rows: pa.Table, plan: MergePlan, schema: pa.Schema, options: Options, target: Target,
                     spent: Spent, *, with_key_hashes: bool = False) -> Iterator[Row]:
    """The local engine's reducer over every version of the task's keys, then the upserts
    written as Lance fragments of ``target``. The ``doc`` row holds the document (the fragments,
    the delete keys (driver path only: IPC hex) and the counts per shard) and, if asked, the net
    keys' hashes as bytes. Driverless, an ``offsets`` row follows per base fragment holding rows
    of the net keys (``part``: its id; the offsets as uint32 bytes) for :func:`retire_fragments`."""
    started = time.perf_counter()
    net = reducer(plan, options)(rows)
    ups, dels = net.upserts, net.deletes
    pk = list(plan.primary_key)
    keys = pa.concat_tables([ups.select(pk), dels.select(pk)])
    hashes = key_hashes(keys, pk).tobytes() if with_key_hashes else b""
    written = time.perf_counter()
    spent.add("reduce", written - started)
    fragments = []
    if ups.num_rows:
        _check_open(target, options)
        data = ups.select(schema.names).cast(schema)
        fragments = lance.fragment.write_fragments(data, target.uri, schema=schema, storage_options=options or None)
        prefix = "" if target.retire_at is not None else f"{target.folder}/"
        _written(target, options, [prefix + k for f in fragments for k in data_file_keys(f)])
    found = time.perf_counter()
    spent.add("write", found - written)
    retired: dict[int, np.ndarray] = {}
    if target.retire_at is not None:
        ds = lance.dataset(target.uri, version=target.retire_at, storage_options=options or None)
        retired = by_fragment(base_addresses(ds, keys, pk))
        spent.add("find", time.perf_counter() - found)
    doc: str = json.dumps({
        "fragments": [f.to_json() for f in fragments],
        "deletes": ipc(dels.select(pk)).hex() if dels.num_rows and target.retire_at is None else "",
        "upserted": dict(count_by_shard(ups.column(SHARD), plan.shard_ids)) if ups.num_rows else {},
        "deleted": dict(count_by_shard(dels.column(SHARD), plan.shard_ids)) if dels.num_rows else {},
    })
    yield 0, DOC, doc, hashes
    for fid, offsets in retired.items():
        yield fid, OFFSETS, "", offsets.tobytes()


def retire_fragments(rows: Iterable[Row], target: Target, options: Options) -> Iterator[Row]:
    """One retire task: the rows other than ``offsets`` pass through; its fragments' offsets,
    joined per fragment, become one deletion file each (:func:`memwal.merge.base_rows.retire`),
    returned in a ``retired`` row (``[[id, metadata or None], ...]``)."""
    offsets: list[tuple[int, bytes]] = []
    for row in rows:
        if row[1] == OFFSETS:
            offsets.append((row[0], row[3]))
        else:
            yield row
    if offsets:
        spent = Spent()
        started = time.perf_counter()
        _check_open(target, options)
        ds = lance.dataset(target.uri, version=target.retire_at, storage_options=options or None)
        done = retire(ds, merge_offsets(offsets))
        _written(target, options, [deletion_file_key(m) for _, m in done if m is not None])
        spent.add("retire", time.perf_counter() - started)
        yield 0, RETIRED, json.dumps([[fid, meta.to_json() if meta is not None else None] for fid, meta in done]), b""
        yield spent.row()
