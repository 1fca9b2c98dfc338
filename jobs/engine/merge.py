"""The Spark merge engine: same plan, same Python reduce as the local engine, spread over executors.

Shape of a run: one Spark job, then the driver's commits. The job takes one of two shapes
(the tasks themselves are in :mod:`memwal.spark.engine.merge_tasks`):

1. **By shard** (the default): whole shards per task, each task reading every generation
   of its shards, reducing and staging them, one stage and no shuffle. A primary key is
   written to one shard only (MemWAL spec), so a task holds every version of its keys. The
   tasks also return a 64-bit hash of each net key, and the driver checks that no hash is
   in two tasks before it commits anything; if one is (a key written to two shards, or a
   hash collision), the staged files are removed and the batch runs as a keyed shuffle,
   which refuses the broken key by name or, for a mere collision, merges. A shard whose
   change set is larger than ``shard_max_bytes``, or a batch of more than
   :data:`BY_SHARD_MAX_ROWS` rows (the hashes go to the driver), takes the keyed shuffle.
   At 2M change rows on local[2] (4 shards) the job took 1.0 s against the shuffle's 2.6 s
   on warm workers (issue 23: the Spark engine within 3x of the local one).
2. **Keyed shuffle**: generations packed into read tasks by bytes (``read_task_bytes``; a
   generation larger than a task split by fragment, one with WAL operands read whole), rows
   hash-partitioned by primary key into ``partitions`` Arrow IPC blobs (so the shuffle moves
   a few large byte strings, not rows converted to and from Spark SQL types), then one reduce
   task per partition (``partition_bytes``; at least the cluster's parallelism).

Either way every key's versions meet in one task, which runs
:func:`memwal.merge.changes.reducer`, the very function the local engine runs: last write
wins (:func:`newest_versions`) or, when the table declares merge operators, the fold over the base row
and every operand (:func:`fold_changes`). The engines cannot disagree because they share that
code. The task writes its upserts as Lance fragments under ``_mem_wal/_staging/<run>/`` and
returns the fragments' metadata, its delete keys (key columns only) and its row counts per
shard.

**Commit** (driver). The engine only returns :class:`NetChanges`; the commits are
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
writing) runs on executors. When the staged upserts fit half the local engine's memory
budget the driver reads them into one table first, as the local engine hands Lance its
upserts (the marked pass at 2M change rows: 0.4-0.6 s against 0.85 s from the stream).

Where a whole ``memwal merge --engine spark`` spends its time at 2M change rows on local[2]
(``bench/spark_timeline.py``, 2026-11-23): imports 0.9 s, the session's start-up 1.9-2.1 s
(with the JVM class archive, :mod:`memwal.spark.engine.jvm_archive`), the job 2.0-2.2 s, the
driver's commits 0.55 s, the JVM's exit 0.3 s: 2.5-2.8x the local engine (6.0-6.3 s against
2.2-2.4 s, medians of 3 and 5). The job took 2.6-3.5 s while Spark's Python workers compiled
pyspark from its zip before the first task (:mod:`memwal.spark.engine.python_daemon`), and
the whole was 4.65x before the by-shard shape. With a bare SparkContext (no SparkSession,
:mod:`memwal.spark.engine.session`, 2026-11-25) the start-up is 0.9 s, and the job 1.4-1.5 s
of which 0.75 s is the first Python workers' start (their daemon, then lance, pyarrow and
pandas imported). Measured and not kept: importing those in the daemon before it forks the
workers (3.84 s against 3.81 s whole), a warm-up job started with the context (the merge
waits for the context anyway: 0.1 s at best), tasks returning their upserts to the driver
instead of staging them (collecting 68 MB took 0.5 s more than the staging).

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

import lance
import numpy as np
import pyarrow as pa
from memwal.spark.engine.merge_tasks import (
    read_buckets,
    read_tasks,
    reduce_buckets,
    reduce_shards,
    ref_bytes,
    shard_tasks,
)
from memwal.spark.engine.session import active_or_local
from pyspark import SparkContext

from memwal.core import steps
from memwal.errors import MemWalError
from memwal.merge.changes import NetChanges, empty_keys
from memwal.merge.local import DEFAULT_MEMORY_BUDGET
from memwal.merge.model import MergePlan
from memwal.merge.take import own_chunks
from memwal.table import Table
from memwal.table.naming import STAGING_DIR

log = logging.getLogger(__name__)

#: Bytes of generation data (the shard manifests' in-memory size) one read task takes.
READ_TASK_BYTES = 64 << 20
#: Bytes of change rows one reduce task deduplicates (or folds) and writes.
PARTITION_BYTES = 128 << 20
#: A shard's change set one by-shard task may hold whole (larger: the keyed shuffle).
SHARD_MAX_BYTES = 4 * PARTITION_BYTES
#: Staged upserts up to this many bytes on storage are read into one table on the driver for
#: the marked ``merge_insert`` (Arrow in memory is larger than Lance's files: half the budget).
STAGED_TABLE_BYTES = DEFAULT_MEMORY_BUDGET // 2
#: Change rows up to which a batch may run by shard: the net keys' 8-byte hashes come to
#: the driver for the disjointness check (16M rows: at most 128 MiB there).
BY_SHARD_MAX_ROWS = 16_000_000


class _Job:
    """What every task of one Spark job shares: options, its staging dataset, the timers."""

    def __init__(self, table: Table, plan: MergePlan, schema: pa.Schema, sc) -> None:
        self.plan, self.options = plan, dict(table.storage_options)
        self.staging_key = f"{STAGING_DIR}/merge-{uuid.uuid4().hex[:12]}"
        self.staging_uri = table.store.uri_for(self.staging_key)
        self.schema_bytes = schema.serialize().to_pybytes()
        self.spent = {k: sc.accumulator(0.0) for k in ("read", "reduce", "write")}

    def remove_staged(self, table: Table) -> None:
        table.store.delete_many([o.key for o in table.store.list(f"{self.staging_key}/")])


class SparkMergeEngine:
    """Computes a merge batch's :class:`NetChanges` on executors (see the module docstring)."""

    name = "spark"

    def __init__(
        self,
        sc: SparkContext | None,
        *,
        partitions: int | None = None,
        read_task_bytes: int = READ_TASK_BYTES,
        partition_bytes: int = PARTITION_BYTES,
        shard_max_bytes: int = SHARD_MAX_BYTES,
    ) -> None:
        self._sc = sc
        #: Set, it makes every batch a keyed shuffle into this many partitions.
        self.partitions = partitions
        self.read_task_bytes = read_task_bytes
        self.partition_bytes = partition_bytes
        self.shard_max_bytes = shard_max_bytes
        #: Wall and task seconds of the last run, for ``bench/spark_breakdown.py``.
        self.last_timings: dict[str, float] = {}

    @property
    def sc(self) -> SparkContext:
        """The context, waited for when a batch first needs it: a merge with nothing to merge
        never waits for the JVM (issue 23: 5.9 s against 1.8 s for a no-op before)."""
        if self._sc is None:
            self._sc = active_or_local()
        return self._sc

    @classmethod
    def from_active_or_local(cls) -> SparkMergeEngine:
        return cls(None)

    def net_changes(self, table: Table, plan: MergePlan, schema: pa.Schema) -> NetChanges:
        t0 = time.perf_counter()
        sc = self.sc
        job = _Job(table, plan, schema, sc)
        change_bytes = sum(ref_bytes(r) for r in plan.generations)
        shape, tasks = "shuffle", None
        if self.partitions is None and plan.total_rows <= BY_SHARD_MAX_ROWS:
            tasks = shard_tasks(plan, self.partition_bytes, self.shard_max_bytes, sc.defaultParallelism)
        out = _run(table, job, lambda: self._by_shard(sc, job, tasks)) if tasks else None
        if out is not None:
            shape = "by-shard"
        else:
            if tasks:  # a key in two tasks: its own error, or a hash collision, comes from the shuffle
                job.remove_staged(table)
                job = _Job(table, plan, schema, sc)
            tasks = read_tasks(plan.generations, self.read_task_bytes, job.options)
            parts = self.partitions or max(sc.defaultParallelism, -(-change_bytes // self.partition_bytes))
            out = _run(table, job, lambda: self._shuffled(sc, job, tasks, parts))
        t1 = time.perf_counter()
        net = self._assemble(table, plan, schema, job, [json.loads(o) for o in out])
        self.last_timings = {
            "shape": shape,
            "executors_wall_seconds": t1 - t0,
            "staging_commit_seconds": time.perf_counter() - t1,
            "read_task_seconds": job.spent["read"].value,
            "reduce_task_seconds": job.spent["reduce"].value,
            "write_task_seconds": job.spent["write"].value,
            "read_tasks": len(tasks),
            "partitions": len(tasks) if shape == "by-shard" else parts,
            "change_bytes": change_bytes,
        }
        return net

    @staticmethod
    def _by_shard(sc, job: _Job, tasks: list[list[dict]]) -> list[str] | None:
        """One stage of whole-shard tasks; their documents, or None when a net key's hash came
        from two tasks (nothing is committed then; the caller removes what was staged)."""
        plan, options, uri, spent, schema_bytes = job.plan, job.options, job.staging_uri, job.spent, \
            job.schema_bytes
        barrier = steps.barrier_for_tasks()  # a test holding the stage travels with the tasks

        def task(indices: Iterable[int]) -> Iterator[tuple[str, bytes]]:
            for i in indices:
                steps.step("spark.merge.read-task", barrier=barrier)
                yield from reduce_shards(tasks[i], plan, _schema(schema_bytes), options, uri, spent)

        out = sc.parallelize(range(len(tasks)), len(tasks)).mapPartitions(task).collect()
        hashes = np.sort(np.concatenate([np.frombuffer(h, dtype=np.uint64) for _, h in out] or
                                        [np.zeros(0, np.uint64)]))  # np.sort: 0.02 s for 1.8M; np.unique 1.5 s
        if np.any(hashes[1:] == hashes[:-1]):
            log.warning("merge %s: a net key hash appears in two by-shard tasks; merging with a keyed shuffle",
                        plan.table)
            return None
        return [doc for doc, _ in out]

    @staticmethod
    def _shuffled(sc, job: _Job, tasks: list, parts: int) -> list[str]:
        """Read tasks, a shuffle of IPC blobs by key, one reduce task per partition."""
        plan, options, uri, spent, schema_bytes = job.plan, job.options, job.staging_uri, job.spent, \
            job.schema_bytes
        shard_ids, pk = plan.shard_ids, plan.primary_key
        barrier = steps.barrier_for_tasks()

        def read(i: int) -> Iterator[tuple[int, bytes]]:
            steps.step("spark.merge.read-task", barrier=barrier)
            started = time.perf_counter()
            yield from read_buckets(tasks[i], _schema(schema_bytes), options, shard_ids, pk, parts)
            spent["read"].add(time.perf_counter() - started)

        def reduce(pairs: Iterable[tuple[int, bytes]]) -> Iterator[str]:
            yield from reduce_buckets(pairs, plan, _schema(schema_bytes), options, uri, spent)

        return (sc.parallelize(range(len(tasks)), max(1, len(tasks))).flatMap(read)
                .partitionBy(parts, lambda k: k).mapPartitions(reduce).collect())

    def _assemble(self, table: Table, plan: MergePlan, schema: pa.Schema, job: _Job,
                  out: list[dict]) -> NetChanges:
        """The driver's half: one commit of the staged fragments (a dataset of its own under
        ``_staging``, never the table), the delete keys and the counts."""
        pk = plan.primary_key
        fragments = [lance.fragment.FragmentMetadata.from_json(json.dumps(f)) for o in out for f in o["fragments"]]
        net = NetChanges(schema=schema, primary_key=pk, delete_keys=empty_keys(schema, pk),
                         open_upserts=lambda: pa.RecordBatchReader.from_batches(schema, iter(())),
                         cleanups=[lambda: job.remove_staged(table)])
        if fragments:
            staged = lance.LanceDataset.commit(job.staging_uri, lance.LanceOperation.Overwrite(schema, fragments),
                                               storage_options=table.storage_options or None)
            net.open_upserts = lambda: _staged_upserts(staged, schema)
            staged_bytes = sum(f["file_size_bytes"] for o in out for fr in o["fragments"] for f in fr["files"])
            if staged_bytes <= STAGED_TABLE_BYTES:
                # as the local engine does within its budget: Lance's merge_insert of a table is
                # faster than of a stream (2M change rows: 0.4-0.6 s against 0.85 s, the read 0.1 s)
                net.upsert_table = own_chunks(staged.to_table(columns=schema.names).cast(schema))
        keys = [pa.ipc.open_stream(bytes.fromhex(o["deletes"])).read_all() for o in out if o["deletes"]]
        if keys:
            net.delete_keys = pa.concat_tables(keys).cast(pa.schema([schema.field(k) for k in pk]))
        for o in out:
            net.rows_upserted.update(o["upserted"])
            net.rows_deleted.update(o["deleted"])
        return net


def _run(table: Table, job: _Job, collect):
    """Run a Spark job (``collect``); if it fails, what its tasks staged is removed, and an
    executor's error of ours comes back with its class and one-line message (the exit code
    holds), the JVM's trace dropped."""
    try:
        return collect()
    except Exception as exc:
        try:
            job.remove_staged(table)
        except Exception as left:  # the job's own error matters more; GC collects staging orphans
            log.warning("merge %s: staged files left under %s: %s", table.uri, job.staging_key, left)
        ours = executor_error(exc)
        if ours is None:
            raise
        raise ours from None


def _schema(schema_bytes: bytes) -> pa.Schema:
    """The table schema a task receives as IPC bytes (:attr:`_Job.schema_bytes`)."""
    return pa.ipc.read_schema(pa.py_buffer(schema_bytes))


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

