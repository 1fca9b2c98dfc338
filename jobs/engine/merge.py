"""The Spark merge engine: same plan, same Python reduce as the local engine, spread over executors.

Contract. One Spark job per batch computes every key's net version with
:func:`memwal.merge.changes.reducer`, the very function the local engine runs (last write wins,
or the fold of the table's merge operators), so the engines cannot disagree. The job is **by
shard** (whole shards per task, no shuffle: a primary key lives in one shard; the driver checks
the net keys' hashes are disjoint across tasks before anything is committed, else runs the batch
as the shuffle, which names a key in two shards) or a **keyed shuffle** (read tasks packed by
bytes, rows hash-partitioned by key, one reduce task per partition) for large shards, large
batches or :attr:`SparkMergeEngine.partitions` (:mod:`memwal.spark.engine.merge_tasks`).

What leaves the executors follows the core's commit path (:func:`memwal.merge.execute.commit_path`):
**driverless** (:meth:`SparkMergeEngine.table_changes`, last-write-wins tables): tasks write the
upserts as base-table fragments and one deletion file per base fragment; the driver commits their
metadata only (:mod:`memwal.merge.driverless`). **driver** (:meth:`SparkMergeEngine.net_changes`:
merge operators, or ``driverless=False``): tasks stage upserts under ``_mem_wal/_staging/<run>/``
and return delete keys; the driver's marked ``merge_insert`` applies them (data and marker in one
commit, H2).

Whatever a failed job wrote is removed (the staging dataset, or the files the tasks' receipts
under the job's staging folder list, a retried attempt's included); a killed driver leaves that
folder to ``gc --orphans`` and the files to Lance's ``cleanup_old_versions``. Nothing assumes
local mode: the table URI and storage options travel in closures, so executors need only
memwal-jobs and pylance installed. Why these shapes: docs/decisions/0005 and 0014.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import lance
import pyarrow as pa
from lance.fragment import FragmentMetadata
from memwal.spark.engine.job_groups import settle, stoppable_group
from memwal.spark.engine.merge_tasks import (
    Doc,
    Item,
    Keyed,
    Payload,
    Retired,
    Target,
    keys_disjoint,
    read_buckets,
    read_tasks,
    reduce_buckets,
    reduce_shards,
    ref_bytes,
    retire_fragments,
    retire_partition,
    shard_tasks,
)
from memwal.spark.engine.session import active_or_local
from pyspark import RDD, SparkContext

from memwal.core import steps
from memwal.errors import MemWalError
from memwal.merge.changes import NetChanges, empty_keys
from memwal.merge.driverless import TableChanges, data_file_keys, deletion_file_key, remove_uncommitted
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
#: A task's receipt larger than this is not read (storage is untrusted input).
RECEIPT_MAX_BYTES = 16 << 20
#: Change rows up to which a batch may run by shard: the net keys' 8-byte hashes come to
#: the driver for the disjointness check (16M rows: at most 128 MiB there).
BY_SHARD_MAX_ROWS = 16_000_000


class _Job:
    """What every task of one Spark job shares: options, its write target, the timers.

    Its folder under ``_mem_wal/_staging/`` holds the staging dataset (driver path) or the
    tasks' receipts of the files they wrote into the table (driverless)."""

    def __init__(self, table: Table, plan: MergePlan, schema: pa.Schema, sc: SparkContext, *,
                 driverless: bool) -> None:
        self.plan, self.options, self.table_uri = plan, dict(table.storage_options), table.uri
        self.driverless = driverless
        self.folder = f"{STAGING_DIR}/merge-{uuid.uuid4().hex[:12]}"
        self.target = (Target(table.uri, plan.read_version, self.folder) if driverless
                       else Target(table.store.uri_for(self.folder)))
        self.schema_bytes = schema.serialize().to_pybytes()
        self.spent = {k: sc.accumulator(0.0) for k in ("read", "reduce", "write", "find", "retire")}
        #: Partitions of the retire stage: the base fragments at the read version, at most the parallelism.
        self.retire_parts = (max(1, min(len(table.dataset(plan.read_version).get_fragments()), sc.defaultParallelism))
                             if driverless else 0)

    def remove_written(self, table: Table, *, keep: frozenset[str] = frozenset()) -> None:
        """Remove the job's folder and, driverless, every file its receipts list but ``keep``
        (what the driver will commit): a failed job's, a retried task attempt's."""
        store = table.store
        folder = [o.key for o in store.list(f"{self.folder}/")]
        if self.driverless:
            listed: set[str] = set()
            for key in folder:
                if not key.endswith(".json"):
                    continue
                try:
                    doc = json.loads(store.get(key, max_bytes=RECEIPT_MAX_BYTES))
                except (MemWalError, ValueError) as exc:  # a receipt not ours: its files stay for Lance's cleanup
                    log.warning("merge %s: receipt %s not read: %s", table.uri, store.uri_for(key), exc)
                    continue
                listed |= {k for k in doc if isinstance(k, str)} if isinstance(doc, list) else set()
            remove_uncommitted(table, sorted(listed - keep))
        store.delete_many(folder)


@dataclass
class _Output:
    """What a job's tasks returned, whatever its shape and path."""

    docs: list[dict[str, Any]] = field(default_factory=list)
    hashes: list[bytes] = field(default_factory=list)
    retired: list[tuple[int, FragmentMetadata | None]] = field(default_factory=list)

    def new_fragments(self) -> list[FragmentMetadata]:
        return [FragmentMetadata.from_json(json.dumps(f)) for o in self.docs for f in o["fragments"]]

    def written(self) -> list[str]:
        """Store keys of the files a driverless job wrote into the base table."""
        keys = [k for f in self.new_fragments() for k in data_file_keys(f)]
        return keys + [deletion_file_key(m) for _, m in self.retired if m is not None]

    def counts(self, kind: str) -> Counter[str]:
        out: Counter[str] = Counter()
        for o in self.docs:
            out.update(o[kind])
        return out


def _output(rows: Iterable[Doc | Retired]) -> _Output:
    """A job's rows: a driver-path task's :data:`Doc`, or a retire task's :data:`Retired`."""
    out = _Output()
    for row in rows:
        if len(row) == 2:
            doc, hashes = row
            out.docs.append(json.loads(doc))
            out.hashes.append(hashes)
        elif row[0] == "doc":
            out.docs.append(json.loads(row[1]))
            out.hashes.append(row[2])
        else:
            out.retired += [(int(fid), FragmentMetadata.from_json(json.dumps(m)) if m else None)
                            for fid, m in json.loads(row[1])]
    return out


class SparkMergeEngine:
    """Computes a merge batch on executors (see the module docstring)."""

    name = "spark"

    def __init__(
        self,
        sc: SparkContext | None,
        *,
        partitions: int | None = None,
        read_task_bytes: int = READ_TASK_BYTES,
        partition_bytes: int = PARTITION_BYTES,
        shard_max_bytes: int = SHARD_MAX_BYTES,
        driverless: bool = True,
    ) -> None:
        self._sc = sc
        #: Set, it makes every batch a keyed shuffle into this many partitions.
        self.partitions = partitions
        self.read_task_bytes = read_task_bytes
        self.partition_bytes = partition_bytes
        self.shard_max_bytes = shard_max_bytes
        #: Whether last-write-wins batches are written by the executors (the core decides per batch).
        self.driverless = driverless
        #: Wall and task seconds of the last run, for ``bench/spark/breakdown.py``.
        self.last_timings: dict[str, Any] = {}

    @property
    def sc(self) -> SparkContext:
        """The context, waited for when a batch first needs it: a merge with nothing to merge
        never waits for the JVM."""
        if self._sc is None:
            self._sc = active_or_local()
        return self._sc

    @classmethod
    def from_active_or_local(cls) -> SparkMergeEngine:
        return cls(None)

    def net_changes(self, table: Table, plan: MergePlan, schema: pa.Schema) -> NetChanges:
        """The driver path: upserts staged by the tasks, delete keys returned to the driver."""
        job, out = self._collect(table, plan, schema, driverless=False)
        t1 = time.perf_counter()
        net = _assemble(table, schema, job, out)
        self.last_timings["staging_commit_seconds"] = time.perf_counter() - t1
        return net

    def table_changes(self, table: Table, plan: MergePlan, schema: pa.Schema) -> TableChanges:
        """The driverless path: fragments and deletion files written into the base table."""
        job, out = self._collect(table, plan, schema, driverless=True)
        self.last_timings["staging_commit_seconds"] = 0.0
        job.remove_written(table, keep=frozenset(out.written()))
        removed = sorted(fid for fid, m in out.retired if m is None)
        return TableChanges(new_fragments=out.new_fragments(), removed_fragment_ids=removed,
                            updated_fragments=[m for _, m in sorted(out.retired, key=lambda r: r[0]) if m is not None],
                            rows_upserted=out.counts("upserted"), rows_deleted=out.counts("deleted"),
                            written=out.written())

    def _collect(self, table: Table, plan: MergePlan, schema: pa.Schema, *, driverless: bool) -> tuple[_Job, _Output]:
        """Run the batch's job, by shard when it may, else (or when a key hash came from two
        tasks) as the keyed shuffle."""
        waited = time.perf_counter()
        sc = self.sc
        t0 = time.perf_counter()
        job = _Job(table, plan, schema, sc, driverless=driverless)
        change_bytes = sum(ref_bytes(r) for r in plan.generations)
        shape, tasks, out = "shuffle", None, None
        count = 0
        if self.partitions is None and plan.total_rows <= BY_SHARD_MAX_ROWS:
            tasks = shard_tasks(plan, self.partition_bytes, self.shard_max_bytes, sc.defaultParallelism)
        if tasks:
            by_shard, count = tasks, len(tasks)
            out = _run(sc, table, job, lambda: _output(self._by_shard(sc, job, by_shard)))
            if keys_disjoint(out.hashes):
                shape = "by-shard"
            else:  # a key in two tasks: its own error, or a hash collision, comes from the shuffle
                log.warning("merge %s: a net key hash appears in two by-shard tasks; merging with a keyed shuffle",
                            plan.table)
                job.remove_written(table)
                job, out = _Job(table, plan, schema, sc, driverless=driverless), None
        parts = 0
        if out is None:
            read = read_tasks(plan.generations, self.read_task_bytes, job.options)
            parts = self.partitions or max(sc.defaultParallelism, -(-change_bytes // self.partition_bytes))
            out = _run(sc, table, job, lambda: _output(self._shuffled(sc, job, read, parts)))
            count = len(read)
        self.last_timings = {
            "shape": shape,
            "commit_path": "driverless" if driverless else "driver",
            "context_wait_seconds": t0 - waited,
            "executors_wall_seconds": time.perf_counter() - t0,
            "read_task_seconds": job.spent["read"].value,
            "reduce_task_seconds": job.spent["reduce"].value,
            "write_task_seconds": job.spent["write"].value,
            "find_task_seconds": job.spent["find"].value,
            "retire_task_seconds": job.spent["retire"].value,
            "read_tasks": count,
            "partitions": count if shape == "by-shard" else parts,
            "retire_partitions": job.retire_parts,
            "change_bytes": change_bytes,
        }
        return job, out

    @staticmethod
    def _by_shard(sc: SparkContext, job: _Job, tasks: list[list[Payload]]) -> list[Doc | Retired]:
        """One stage of whole-shard tasks (then the retire stage, driverless)."""
        plan, options, target, spent, schema_bytes = job.plan, job.options, job.target, job.spent, job.schema_bytes
        barrier = steps.barrier_for_tasks()  # a test holding the stage travels with the tasks

        def task(indices: Iterable[int]) -> Iterator[Doc | Keyed]:
            for i in indices:
                steps.step("spark.merge.read-task", barrier=barrier)
                yield from reduce_shards(tasks[i], plan, _schema(schema_bytes), options, target, spent)

        rdd = sc.parallelize(range(len(tasks)), len(tasks)).mapPartitions(task)
        return _collected(rdd, job)

    @staticmethod
    def _shuffled(sc: SparkContext, job: _Job, tasks: list[list[Item]], parts: int) -> list[Doc | Retired]:
        """Read tasks, a shuffle of IPC blobs by key, one reduce task per partition (then the
        retire stage, driverless)."""
        plan, options, target, spent, schema_bytes = job.plan, job.options, job.target, job.spent, job.schema_bytes
        shard_ids, pk = plan.shard_ids, list(plan.primary_key)
        barrier = steps.barrier_for_tasks()

        def read(i: int) -> Iterator[tuple[int, bytes]]:
            steps.step("spark.merge.read-task", barrier=barrier)
            started = time.perf_counter()
            yield from read_buckets(tasks[i], _schema(schema_bytes), options, shard_ids, pk, parts)
            spent["read"].add(time.perf_counter() - started)

        def reduce(pairs: Iterable[tuple[int, bytes]]) -> Iterator[Doc | Keyed]:
            yield from reduce_buckets(pairs, plan, _schema(schema_bytes), options, target, spent)

        rdd = sc.parallelize(range(len(tasks)), max(1, len(tasks))).flatMap(read).partitionBy(
            parts, lambda k: k).mapPartitions(reduce)
        return _collected(rdd, job)


def _collected(rdd: RDD[Doc | Keyed], job: _Job) -> list[Doc | Retired]:
    """The reduce tasks' rows (driver path), or after them the retire stage: their offsets
    shuffled by base fragment, one deletion file per fragment
    (:func:`memwal.spark.engine.merge_tasks.retire_fragments`)."""
    # What reduce_and_write yields follows the target: a driver path's (no rows to retire) only
    # Docs, a driverless job's (its target retires base rows) only Keyed pairs.
    if not job.driverless:
        return list(cast("RDD[Doc]", rdd).collect())
    keyed = cast("RDD[Keyed]", rdd)
    target, options, spent = job.target, job.options, job.spent
    retired = keyed.partitionBy(job.retire_parts, retire_partition).mapPartitions(
        lambda pairs: retire_fragments(pairs, target, options, spent))
    return list(retired.collect())


def _assemble(table: Table, schema: pa.Schema, job: _Job, out: _Output) -> NetChanges:
    """The driver path's half: one commit of the staged fragments (a dataset of its own under
    ``_staging``, never the table), the delete keys and the counts."""
    pk = list(job.plan.primary_key)
    fragments = out.new_fragments()
    net = NetChanges(schema=schema, primary_key=pk, delete_keys=empty_keys(schema, pk),
                     open_upserts=lambda: pa.RecordBatchReader.from_batches(schema, iter(())),
                     cleanups=[lambda: job.remove_written(table)])
    if fragments:
        staged = lance.LanceDataset.commit(job.target.uri, lance.LanceOperation.Overwrite(schema, fragments),
                                           storage_options=table.storage_options or None)
        net.open_upserts = lambda: _staged_upserts(staged, schema)
        staged_bytes = sum(f["file_size_bytes"] for o in out.docs for fr in o["fragments"] for f in fr["files"])
        if staged_bytes <= STAGED_TABLE_BYTES:
            # as the local engine does within its budget: Lance's merge_insert of a table is
            # faster than of a stream (docs/decisions/0005-spark-merge-shapes.md)
            net.upsert_table = own_chunks(staged.to_table(columns=schema.names).cast(schema))
    keys = [pa.ipc.open_stream(bytes.fromhex(o["deletes"])).read_all() for o in out.docs if o["deletes"]]
    if keys:
        net.delete_keys = pa.concat_tables(keys).cast(pa.schema([schema.field(k) for k in pk]))
    net.rows_upserted.update(out.counts("upserted"))
    net.rows_deleted.update(out.counts("deleted"))
    return net


def _run(sc: SparkContext, table: Table, job: _Job, collect: Callable[[], _Output]) -> _Output:
    """Run a Spark job (``collect``) in a job group (cancelled by an operator's cancel of the
    merge: :func:`memwal.spark.engine.job_groups.stoppable_group`); if it fails, what its tasks wrote is removed
    once they have all ended (:mod:`memwal.spark.engine.job_groups`), and an executor's error of
    ours comes back with its class and one-line message (the exit code holds), the JVM's trace
    dropped."""
    with stoppable_group(sc, f"memwal-{job.folder.rsplit('/', 1)[-1]}") as group:
        try:
            return collect()
        except Exception as exc:
            try:
                settle(sc, group)
                job.remove_written(table)
            except Exception as left:  # the job's own error matters more; GC collects staging orphans
                log.warning("merge %s: files left under %s: %s", table.uri, job.folder, left)
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
