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

The stages are DataFrames (:mod:`memwal.spark.engine.frames`): a range of task indices mapped
by ``mapInArrow``, ``repartitionById`` where rows go by bucket or by base fragment, ``toArrow``
back to the driver; the same code on a classic session and over Spark Connect. Whatever a
failed job wrote is removed (the staging dataset, or the files the tasks' receipts under the
job's staging folder list, a retried attempt's included), after the folder is closed so a task
still running removes what it writes (:func:`memwal.spark.engine.merge_tasks.close`); a killed
driver leaves that folder to ``gc --orphans`` and the files to Lance's ``cleanup_old_versions``.
Nothing assumes local mode: the table's absolute URI and storage options travel in closures, so
executors need only memwal-jobs and pylance installed. Why these shapes: docs/decisions/0005 and 0014.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import lance
import pyarrow as pa
from lance.fragment import FragmentMetadata
from memwal.spark.engine.frames import task_frame, task_ids, task_uri
from memwal.spark.engine.merge_tasks import (
    CLOSED,
    DOC,
    RETIRED,
    ROW_DDL,
    SPENT,
    Item,
    Payload,
    Target,
    batch,
    close,
    keys_disjoint,
    read_buckets,
    read_tasks,
    reduce_buckets,
    reduce_shards,
    ref_bytes,
    retire_fragments,
    rows_of,
    shard_tasks,
)
from memwal.spark.engine.session import active_or_local, default_parallelism, is_connect
from memwal.spark.engine.tags import stoppable_job

from memwal.core import steps
from memwal.errors import MemWalError
from memwal.merge.changes import NetChanges, empty_keys
from memwal.merge.driverless import TableChanges, data_file_keys, deletion_file_key, remove_uncommitted
from memwal.merge.local import DEFAULT_MEMORY_BUDGET
from memwal.merge.model import GenerationRef, MergePlan
from memwal.merge.take import own_chunks
from memwal.table import Table
from memwal.table.naming import STAGING_DIR

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
    """What every task of one Spark job shares: options and its write target.

    Its folder under ``_mem_wal/_staging/`` holds the staging dataset (driver path) or the
    tasks' receipts of the files they wrote into the table (driverless)."""

    def __init__(self, table: Table, plan: MergePlan, schema: pa.Schema, parallelism: int, *,
                 driverless: bool) -> None:
        uri = task_uri(table)
        self.plan, self.options = _for_tasks(plan, uri), dict(table.storage_options)
        self.driverless = driverless
        self.folder = f"{STAGING_DIR}/merge-{uuid.uuid4().hex[:12]}"
        self.target = Target(uri if driverless else table.store.uri_for(self.folder), uri, self.folder,
                             plan.read_version if driverless else None)
        self.schema_bytes = schema.serialize().to_pybytes()
        #: Partitions of the retire stage: the base fragments at the read version, at most the parallelism.
        self.retire_parts = (max(1, min(len(table.dataset(plan.read_version).get_fragments()), parallelism))
                             if driverless else 0)

    def remove_written(self, table: Table, *, keep: frozenset[str] = frozenset(), settled: bool = True) -> None:
        """Close the job's folder (:func:`memwal.spark.engine.merge_tasks.close`: a task still
        running writes nothing more), then remove it and, driverless, every file its receipts
        list but ``keep`` (what the driver will commit): a failed job's, a retried task
        attempt's. Unless every task is known to have ended (``settled``), the closed mark
        stays: the folder is then an orphan for ``gc --orphans``."""
        store = table.store
        close(table, self.folder)
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
        store.delete_many([k for k in folder if settled or not k.endswith(f"/{CLOSED}")])


def _for_tasks(plan: MergePlan, uri: str) -> MergePlan:
    """The plan as tasks get it: the table's URI (and each generation's) as :func:`task_uri` gives it."""
    def ref(g: GenerationRef) -> GenerationRef:
        return replace(g, table_uri=uri) if g.table_uri else g

    shards = tuple(replace(s, generations=tuple(ref(g) for g in s.generations)) for s in plan.shards)
    return replace(plan, table=uri, shards=shards)


@dataclass
class _Output:
    """What a job's tasks returned, whatever its shape and path."""

    docs: list[dict[str, Any]] = field(default_factory=list)
    hashes: list[bytes] = field(default_factory=list)
    retired: list[tuple[int, FragmentMetadata | None]] = field(default_factory=list)
    spent: Counter[str] = field(default_factory=Counter)

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


def _output(table: pa.Table) -> _Output:
    """A job's rows (:data:`memwal.spark.engine.merge_tasks.ROW_SCHEMA`), sorted out."""
    out = _Output()
    for _, kind, text, blob in rows_of(table.to_batches()):
        if kind == DOC:
            out.docs.append(json.loads(text))
            out.hashes.append(blob)
        elif kind == RETIRED:
            out.retired += [(int(fid), FragmentMetadata.from_json(json.dumps(m)) if m else None)
                            for fid, m in json.loads(text)]
        elif kind == SPENT:
            out.spent.update(json.loads(text))
    return out


class SparkMergeEngine:
    """Computes a merge batch on executors (see the module docstring)."""

    name = "spark"

    def __init__(
        self,
        spark: SparkSession | None,
        *,
        partitions: int | None = None,
        read_task_bytes: int = READ_TASK_BYTES,
        partition_bytes: int = PARTITION_BYTES,
        shard_max_bytes: int = SHARD_MAX_BYTES,
        driverless: bool = True,
    ) -> None:
        self._spark = spark
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
    def spark(self) -> SparkSession:
        """The session, waited for when a batch first needs it: a merge with nothing to merge
        never waits for it."""
        if self._spark is None:
            self._spark = active_or_local()
        return self._spark

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
        spark = self.spark
        t0 = time.perf_counter()
        parallelism = default_parallelism(spark)
        job = _Job(table, plan, schema, parallelism, driverless=driverless)
        change_bytes = sum(ref_bytes(r) for r in plan.generations)
        shape, tasks, out = "shuffle", None, None
        count = 0
        if self.partitions is None and plan.total_rows <= BY_SHARD_MAX_ROWS:
            tasks = shard_tasks(job.plan, self.partition_bytes, self.shard_max_bytes, parallelism)
        if tasks:
            count = len(tasks)
            out = _run(spark, table, job, _by_shard(spark, job, tasks))
            if keys_disjoint(out.hashes):
                shape = "by-shard"
            else:  # a key in two tasks: its own error, or a hash collision, comes from the shuffle
                log.warning("merge %s: a net key hash appears in two by-shard tasks; merging with a keyed shuffle",
                            plan.table)
                job.remove_written(table)
                job, out = _Job(table, plan, schema, parallelism, driverless=driverless), None
        parts = 0
        if out is None:
            read = read_tasks(job.plan.generations, self.read_task_bytes, job.options)
            parts = self.partitions or max(parallelism, -(-change_bytes // self.partition_bytes))
            out = _run(spark, table, job, _shuffled(spark, job, read, parts))
            count = len(read)
        self.last_timings = {
            "shape": shape,
            "commit_path": "driverless" if driverless else "driver",
            "connect": is_connect(spark),
            "context_wait_seconds": t0 - waited,
            "executors_wall_seconds": time.perf_counter() - t0,
            **{f"{phase}_task_seconds": out.spent.get(phase, 0.0)
               for phase in ("read", "reduce", "write", "find", "retire")},
            "read_tasks": count,
            "partitions": count if shape == "by-shard" else parts,
            "retire_partitions": job.retire_parts,
            "change_bytes": change_bytes,
        }
        return job, out


def _by_shard(spark: SparkSession, job: _Job, tasks: list[list[Payload]]) -> DataFrame:
    """One stage of whole-shard tasks (then the retire stage, driverless)."""
    plan, options, target, schema_bytes = job.plan, job.options, job.target, job.schema_bytes
    barrier = steps.barrier_for_tasks()  # a test holding the stage travels with the tasks

    def task(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for i in task_ids(batches):
            steps.step("spark.merge.read-task", barrier=barrier)
            yield batch(list(reduce_shards(tasks[i], plan, _schema(schema_bytes), options, target)))

    return _retired(task_frame(spark, len(tasks)).mapInArrow(task, ROW_DDL), job)


def _shuffled(spark: SparkSession, job: _Job, tasks: list[list[Item]], parts: int) -> DataFrame:
    """Read tasks, a shuffle of IPC blobs by bucket (``repartitionById``: bucket ``b`` is
    partition ``b``), one reduce task per partition (then the retire stage, driverless)."""
    plan, options, target, schema_bytes = job.plan, job.options, job.target, job.schema_bytes
    shard_ids, pk = plan.shard_ids, list(plan.primary_key)
    barrier = steps.barrier_for_tasks()

    def read(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for i in task_ids(batches):
            steps.step("spark.merge.read-task", barrier=barrier)
            yield batch(list(read_buckets(tasks[i], _schema(schema_bytes), options, shard_ids, pk, parts)))

    def reduce(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield batch(list(reduce_buckets(rows_of(batches), plan, _schema(schema_bytes), options, target)))

    read_stage = task_frame(spark, max(1, len(tasks))).mapInArrow(read, ROW_DDL)
    return _retired(read_stage.repartitionById(parts, "part").mapInArrow(reduce, ROW_DDL), job)


def _retired(reduced: DataFrame, job: _Job) -> DataFrame:
    """The reduce tasks' rows (driver path), or after them the retire stage: their offsets
    sent by base fragment (``repartitionById``: each fragment to one task), one deletion file
    per fragment (:func:`memwal.spark.engine.merge_tasks.retire_fragments`)."""
    if not job.driverless:
        return reduced
    target, options = job.target, job.options
    barrier = steps.barrier_for_tasks()

    def retire(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        steps.step("spark.merge.retire-task", barrier=barrier)  # the upserts are written: a test may hold here
        yield batch(list(retire_fragments(rows_of(batches), target, options)))

    return reduced.repartitionById(job.retire_parts, "part").mapInArrow(retire, ROW_DDL)


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


def _run(spark: SparkSession, table: Table, job: _Job, frame: DataFrame) -> _Output:
    """Run a Spark job (``frame``'s rows, collected) under a tag an operator's cancel of the
    merge interrupts (:func:`memwal.spark.engine.tags.stoppable_job`); if it fails, its folder is
    closed and what its tasks wrote removed, and the error comes back in one line (ours with its
    class, so the exit code holds)."""
    try:
        with stoppable_job(spark, f"memwal-{job.folder.rsplit('/', 1)[-1]}"):
            return _output(frame.toArrow())
    except BaseException:  # an interrupted process too: what the tasks wrote is not left behind
        try:
            job.remove_written(table, settled=not is_connect(spark))
        except Exception as left:  # the job's own error matters more; GC collects staging orphans
            log.warning("merge %s: files left under %s: %s", table.uri, job.folder, left)
        raise


def _schema(schema_bytes: bytes) -> pa.Schema:
    """The table schema a task receives as IPC bytes (:attr:`_Job.schema_bytes`)."""
    return pa.ipc.read_schema(pa.py_buffer(schema_bytes))


def _staged_upserts(staged: lance.LanceDataset, schema: pa.Schema) -> pa.RecordBatchReader:
    reader = staged.scanner(columns=schema.names).to_reader()
    return pa.RecordBatchReader.from_batches(schema, (b.cast(schema) for b in reader))


__all__ = ["SparkMergeEngine"]
