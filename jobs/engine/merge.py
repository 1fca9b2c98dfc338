"""The Spark merge engine: same plan, same Python reduce as the local engine, spread over executors.

Shape of a run (one Spark job, two stages, then the driver's commits):

1. **Read** (stage 1). Generations are packed into tasks by bytes (``read_task_bytes``):
   many small generations share a task, and only a generation larger than a task is split
   by fragment. A generation whose merge operators need its WAL operands
   (``GenerationRef.wal_keys``) is always read whole. A task reads its whole generations
   as the local engine does (a small thread pool, tagged in groups), then hash-partitions its rows by
   primary key into ``partitions`` buckets (the local engine's own partition function) and
   emits one Arrow IPC blob per bucket, so the shuffle moves a few large byte strings, not
   rows converted to and from Spark SQL types.
2. **Reduce and write** (stage 2). ``partitions`` follows the change set's size
   (``partition_bytes``; at least the cluster's parallelism). Every key lands in exactly one
   reduce task, which runs :func:`memwal.merge.changes.reducer`, the very function the local
   engine runs: last write wins (:func:`dedupe`) or, when the table declares merge operators,
   the fold over the base row and every operand (:func:`fold_changes`). The engines cannot
   disagree because they share that code. The task writes its upserts as Lance fragments
   under ``_mem_wal/_staging/<run>/`` and returns the fragments' metadata, its delete keys
   (key columns only) and its row counts per shard.
3. **Commit** (driver). The engine only returns :class:`NetChanges`; the commits are
   ``memwal.merge.execute``'s: the delete pass bound to the plan's read version, then the
   marked ``merge_insert`` whose progress marker lands in the same commit as the upserts,
   each after ``_before_commit`` (lease, progress guard) and the merge intent. The staging
   dataset is removed afterwards (``NetChanges.close``).

Why the marked pass stays on the driver (atomicity of progress with data). pylance 14.0.2
records a ``CompactedSsTable`` marker only through
``merge_insert(...).mark_sstables_as_compacted(...).execute()``: ``execute_uncommitted()``
plus ``LanceDataset.commit`` drops it, ``LanceOperation.Update``/``Merge``/``Append`` and
``Transaction`` have no field for it (``transaction_properties`` is a free string map that
Lance stores in the transaction file, not in the MemWAL index), and there is no API to join
fragments that executors wrote to a marked commit. Executors could rewrite disjoint base
fragments and the driver commit them with ``Update``, but the marker would then need a
second commit, and a crash between the two leaves data without progress: a rerun would
re-apply operands (wrong for ``sum``) and GC would see the generation as unmerged. So the
one commit that carries data and marker together is the driver's ``merge_insert``, streaming
from the staging dataset; everything before it (reading, shuffling, deduping or folding,
writing) runs on executors. ``bench/spark_breakdown.py`` measures the driver's share: at 2M
change rows on local[2] (1.8M upserts) the two commits took 1.7 s (marked pass 1.5 s, the
same ``merge_insert`` the local engine runs, in the same time) against 1.7 s of executor
wall time on warm Python workers (3.9 s on the first job, which starts them) and 2.6 s of
session start-up with the JVM class archive (:mod:`memwal.spark.engine.jvm_archive`). As whole
processes the Spark engine took 2.9x the local engine's time (8.9 s against 3.0 s).

Nothing here assumes local mode: the table URI and storage options travel in closures, so
the same code runs on a cluster whose executors have memwal-jobs and pylance installed.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from memwal.spark.engine.session import active_or_local
from pyspark.sql import SparkSession

from memwal.core import steps
from memwal.errors import MemWalError
from memwal.merge.changes import NetChanges, count_by_shard, empty_keys, reducer
from memwal.merge.local import partition_of
from memwal.merge.model import GenerationRef, MergePlan
from memwal.merge.read import SHARD, TOMBSTONE, read_generation, read_generations
from memwal.table import Table
from memwal.table.naming import STAGING_DIR

log = logging.getLogger(__name__)

#: Bytes of generation data (the shard manifests' in-memory size) one read task takes.
READ_TASK_BYTES = 64 << 20
#: Bytes of change rows one reduce task deduplicates (or folds) and writes.
PARTITION_BYTES = 128 << 20
#: Threads each read task reads its generations with (tasks already run side by side).
TASK_READ_THREADS = 4
#: A read item: a generation and the fragments to read (None: all of them).
Item = tuple[dict, list[int] | None]


class SparkMergeEngine:
    """Computes a merge batch's :class:`NetChanges` on executors (see the module docstring)."""

    name = "spark"

    def __init__(
        self,
        spark: SparkSession | None,
        *,
        partitions: int | None = None,
        read_task_bytes: int = READ_TASK_BYTES,
        partition_bytes: int = PARTITION_BYTES,
    ) -> None:
        self._spark = spark
        self.partitions = partitions
        self.read_task_bytes = read_task_bytes
        self.partition_bytes = partition_bytes
        #: Wall and task seconds of the last run, for ``bench/spark_breakdown.py``.
        self.last_timings: dict[str, float] = {}

    @property
    def spark(self) -> SparkSession:
        """The session, waited for when a batch first needs it: a merge with nothing to merge
        never waits for the JVM (issue 23: 5.9 s against 1.8 s for a no-op before)."""
        if self._spark is None:
            self._spark = active_or_local()
        return self._spark

    @classmethod
    def from_active_or_local(cls) -> SparkMergeEngine:
        return cls(None)

    def net_changes(self, table: Table, plan: MergePlan, schema: pa.Schema) -> NetChanges:
        t0 = time.perf_counter()
        sc = self.spark.sparkContext
        options = dict(table.storage_options)
        staging_key = f"{STAGING_DIR}/merge-{uuid.uuid4().hex[:12]}"
        staging_uri = table.store.uri_for(staging_key)
        total = sum(_ref_bytes(r) for r in plan.generations)
        tasks = read_tasks(plan.generations, self.read_task_bytes, options)
        parts = self.partitions or max(sc.defaultParallelism, -(-total // self.partition_bytes))
        spent = {k: sc.accumulator(0.0) for k in ("read", "reduce", "write")}
        shard_ids, pk = plan.shard_ids, plan.primary_key
        schema_bytes = schema.serialize().to_pybytes()
        barrier = steps.barrier_for_tasks()  # a test holding the stage travels with the tasks

        def read(i: int) -> Iterator[tuple[int, bytes]]:
            steps.step("spark.merge.read-task", barrier=barrier)
            started = time.perf_counter()
            base = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
            yield from _read_buckets(tasks[i], base, options, shard_ids, pk, parts)
            spent["read"].add(time.perf_counter() - started)

        def reduce_and_write(pairs: Iterable[tuple[int, bytes]]) -> Iterator[str]:
            base = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
            yield from _reduce_and_write(pairs, plan, base, options, staging_uri, spent)

        try:
            out = (
                sc.parallelize(range(len(tasks)), max(1, len(tasks)))
                .flatMap(read)
                .partitionBy(parts, lambda k: k)
                .mapPartitions(reduce_and_write)
                .collect()
            )
        except Exception as exc:  # an executor's error: keep our message, drop the JVM trace
            ours = executor_error(exc)
            if ours is None:
                raise
            raise ours from None
        t1 = time.perf_counter()
        net = self._assemble(table, plan, schema, staging_key, staging_uri, [json.loads(o) for o in out])
        self.last_timings = {
            "executors_wall_seconds": t1 - t0,
            "staging_commit_seconds": time.perf_counter() - t1,
            "read_task_seconds": spent["read"].value,
            "reduce_task_seconds": spent["reduce"].value,
            "write_task_seconds": spent["write"].value,
            "read_tasks": len(tasks),
            "partitions": parts,
            "change_bytes": total,
        }
        return net

    def _assemble(
        self, table: Table, plan: MergePlan, schema: pa.Schema, staging_key: str, staging_uri: str, out: list[dict]
    ) -> NetChanges:
        """The driver's half: one commit of the staged fragments (a dataset of its own under
        ``_staging``, never the table), the delete keys and the counts."""
        pk = plan.primary_key
        fragments = [lance.fragment.FragmentMetadata.from_json(json.dumps(f)) for o in out for f in o["fragments"]]

        def cleanup() -> None:
            table.store.delete_many([o.key for o in table.store.list(f"{staging_key}/")])

        net = NetChanges(schema=schema, primary_key=pk, delete_keys=empty_keys(schema, pk),
                         open_upserts=lambda: pa.RecordBatchReader.from_batches(schema, iter(())),
                         cleanups=[cleanup])
        if fragments:
            staged = lance.LanceDataset.commit(staging_uri, lance.LanceOperation.Overwrite(schema, fragments),
                                               storage_options=table.storage_options or None)
            net.open_upserts = lambda: _staged_upserts(staged, schema)
        keys = [pa.ipc.open_stream(bytes.fromhex(o["deletes"])).read_all() for o in out if o["deletes"]]
        if keys:
            net.delete_keys = pa.concat_tables(keys).cast(pa.schema([schema.field(k) for k in pk]))
        for o in out:
            net.rows_upserted.update(o["upserted"])
            net.rows_deleted.update(o["deleted"])
        return net


def _ref_bytes(ref: GenerationRef) -> int:
    """A generation's size for task sizing; the manifest's in-memory size, else a row estimate."""
    return ref.bytes or ref.rows * 128


def read_tasks(refs: list[GenerationRef], task_bytes: int, options: dict) -> list[list[Item]]:
    """Pack generations into read tasks of about ``task_bytes``, in plan order.

    Whole generations are packed together; one larger than a task is split by fragment
    (opening only that generation), except when its operands come from its WAL entries,
    which are read whole.
    """
    tasks: list[list[Item]] = []
    current: list[Item] = []
    size = 0
    for ref in refs:
        payload, n = asdict(ref), _ref_bytes(ref)
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


def _read_buckets(
    items: list[Item], schema: pa.Schema, options: dict, shard_ids: list[str], pk: list[str], parts: int
) -> Iterator[tuple[int, bytes]]:
    """One read task: its rows, tagged like the local engine's, as one IPC blob per bucket.

    Whole generations are read as the local engine reads them (:func:`read_generations`:
    a bounded thread pool, consecutive generations conformed and tagged together); a part
    of a large generation is read by its fragments.
    """
    code_of = {sid: i for i, sid in enumerate(shard_ids)}
    refs = [(GenerationRef(**{**payload, "wal_keys": tuple(payload["wal_keys"])}), fragment_ids)
            for payload, fragment_ids in items]
    frames = list(read_generations([r for r, f in refs if f is None], schema, options, code_of,
                                   threads=TASK_READ_THREADS))
    for ref, fragment_ids in refs:
        if fragment_ids is not None:
            frames += read_generation(ref, schema, options, code_of[ref.shard_id], fragment_ids=fragment_ids)
    if not frames:
        return
    t = pa.concat_tables(frames, promote_options="permissive")
    bucket = partition_of(t, pk, parts)
    order = np.argsort(bucket, kind="stable")
    t, bucket = t.take(pa.array(order)), bucket[order]
    edges = np.flatnonzero(np.diff(bucket)) + 1
    for start, end in zip(np.r_[0, edges], np.r_[edges, len(bucket)], strict=True):
        yield int(bucket[start]), _ipc(t.slice(start, end - start))


def _ipc(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


def _reduce_and_write(
    pairs: Iterable[tuple[int, bytes]], plan: MergePlan, schema: pa.Schema, options: dict, staging_uri: str, spent: dict
) -> Iterator[str]:
    """One reduce task: the local engine's reducer over its keys, upserts staged as fragments."""
    started = time.perf_counter()
    tables = [pa.ipc.open_stream(blob).read_all() for _, blob in pairs]
    if not tables:
        return
    net = reducer(plan, options)(pa.concat_tables(tables, promote_options="permissive"))
    tomb = net.column(TOMBSTONE)
    dels, ups = net.filter(tomb), net.filter(pc.invert(tomb))
    written = time.perf_counter()
    spent["reduce"].add(written - started)
    fragments = []
    if ups.num_rows:
        data = ups.select(schema.names).cast(schema)
        fragments = lance.fragment.write_fragments(data, staging_uri, schema=schema, storage_options=options or None)
    spent["write"].add(time.perf_counter() - written)
    yield json.dumps({
        "fragments": [f.to_json() for f in fragments],
        "deletes": _ipc(dels.select(plan.primary_key)).hex() if dels.num_rows else "",
        "upserted": dict(count_by_shard(ups.column(SHARD), plan.shard_ids)) if ups.num_rows else {},
        "deleted": dict(count_by_shard(dels.column(SHARD), plan.shard_ids)) if dels.num_rows else {},
    })


def _staged_upserts(staged: lance.LanceDataset, schema: pa.Schema) -> pa.RecordBatchReader:
    reader = staged.scanner(columns=schema.names).to_reader()
    return pa.RecordBatchReader.from_batches(schema, (b.cast(schema) for b in reader))


_PY_ERROR = re.compile(r"^(memwal(?:\.\w+)*)\.(\w+): (.+)$", re.MULTILINE)


def executor_error(exc: BaseException) -> MemWalError | None:
    """Our own error raised on an executor, rebuilt on the driver with its class (so the exit
    code holds) and its one-line message; None when the failure is not ours."""
    import importlib

    found = _PY_ERROR.findall(str(exc))
    if not found:
        return None
    module, name, message = found[-1]
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        cls = MemWalError
    if not (isinstance(cls, type) and issubclass(cls, MemWalError)):
        cls = MemWalError
    return cls(message.strip())

