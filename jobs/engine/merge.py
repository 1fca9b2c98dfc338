"""The Spark merge engine: same plan, same Python reduce as the local engine, spread over executors.

Contract. One Spark job per batch computes every key's net version with
:func:`memwal.merge.changes.reducer`, the very function the local engine runs (last write wins,
or the fold of the table's merge operators), so the engines cannot disagree. The job is **by
shard** (whole shards per task, no shuffle: a primary key lives in one shard; the driver checks
the net keys' hashes are disjoint across tasks before anything is committed, else runs the batch
as the shuffle, which names a key in two shards) or a **keyed shuffle** (read tasks packed by
bytes, rows hash-partitioned by key, one reduce task per partition) for large shards, large
batches or :attr:`SparkMergeEngine.partitions` (:mod:`memwal.tasks.merge_tasks`).

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
still running removes what it writes (:func:`memwal.tasks.merge_tasks.close`); a killed
driver leaves that folder to ``gc --orphans`` and the files to Lance's ``cleanup_old_versions``.
Nothing assumes local mode: the table's absolute URI and storage options travel in closures, so
executors need only memwal-jobs and pylance installed. Why these shapes: docs/decisions/0005 and 0014.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from memwal.spark.engine.frames import task_frame, task_ids
from memwal.spark.engine.session import active_or_local, default_parallelism, is_connect
from memwal.spark.engine.tags import stoppable_job

from memwal.core import steps
from memwal.table import Table
from memwal.tasks.merge_job import MergeJob, Output, TaskMergeEngine, schema_of
from memwal.tasks.merge_tasks import (
    Item,
    Payload,
    batch,
    read_buckets,
    reduce_buckets,
    reduce_shards,
    retire_fragments,
    rows_of,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: :data:`memwal.tasks.merge_tasks.ROW_SCHEMA` as Spark's DDL, for ``mapInArrow``.
ROW_DDL = "part int, kind string, text string, blob binary"


class SparkMergeEngine(TaskMergeEngine):
    """Computes a merge batch on executors (see the module docstring)."""

    name = "spark"

    def __init__(self, spark: SparkSession | None, **sizes: Any) -> None:
        super().__init__(**sizes)
        self._spark = spark

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

    def _parallelism(self) -> int:
        return default_parallelism(self.spark)

    def _timings(self) -> dict[str, Any]:
        return {"connect": is_connect(self.spark)}

    def _by_shard(self, table: Table, job: MergeJob, tasks: list[list[Payload]]) -> Output:
        return _run(self.spark, table, job, _by_shard(self.spark, job, tasks))

    def _shuffled(self, table: Table, job: MergeJob, tasks: list[list[Item]], parts: int) -> Output:
        return _run(self.spark, table, job, _shuffled(self.spark, job, tasks, parts))


def _by_shard(spark: SparkSession, job: MergeJob, tasks: list[list[Payload]]) -> DataFrame:
    """One stage of whole-shard tasks (then the retire stage, driverless)."""
    plan, options, target, schema_bytes = job.plan, job.options, job.target, job.schema_bytes
    barrier = steps.barrier_for_tasks()  # a test holding the stage travels with the tasks

    def task(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for i in task_ids(batches):
            steps.step("spark.merge.read-task", barrier=barrier)
            yield batch(list(reduce_shards(tasks[i], plan, schema_of(schema_bytes), options, target)))

    return _retired(task_frame(spark, len(tasks)).mapInArrow(task, ROW_DDL), job)


def _shuffled(spark: SparkSession, job: MergeJob, tasks: list[list[Item]], parts: int) -> DataFrame:
    """Read tasks, a shuffle of IPC blobs by bucket (``repartitionById``: bucket ``b`` is
    partition ``b``), one reduce task per partition (then the retire stage, driverless)."""
    plan, options, target, schema_bytes = job.plan, job.options, job.target, job.schema_bytes
    shard_ids, pk = plan.shard_ids, list(plan.primary_key)
    barrier = steps.barrier_for_tasks()

    def read(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for i in task_ids(batches):
            steps.step("spark.merge.read-task", barrier=barrier)
            yield batch(list(read_buckets(tasks[i], schema_of(schema_bytes), options, shard_ids, pk, parts)))

    def reduce(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield batch(list(reduce_buckets(rows_of(batches), plan, schema_of(schema_bytes), options, target)))

    read_stage = task_frame(spark, max(1, len(tasks))).mapInArrow(read, ROW_DDL)
    return _retired(read_stage.repartitionById(parts, "part").mapInArrow(reduce, ROW_DDL), job)


def _retired(reduced: DataFrame, job: MergeJob) -> DataFrame:
    """The reduce tasks' rows (driver path), or after them the retire stage: their offsets
    sent by base fragment (``repartitionById``: each fragment to one task), one deletion file
    per fragment (:func:`memwal.tasks.merge_tasks.retire_fragments`)."""
    if not job.driverless:
        return reduced
    target, options = job.target, job.options
    barrier = steps.barrier_for_tasks()

    def retire(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        steps.step("spark.merge.retire-task", barrier=barrier)  # the upserts are written: a test may hold here
        yield batch(list(retire_fragments(rows_of(batches), target, options)))

    return reduced.repartitionById(job.retire_parts, "part").mapInArrow(retire, ROW_DDL)


def _run(spark: SparkSession, table: Table, job: MergeJob, frame: DataFrame) -> Output:
    """Run a Spark job (``frame``'s rows, collected) under a tag an operator's cancel of the
    merge interrupts (:func:`memwal.spark.engine.tags.stoppable_job`); if it fails, its folder is
    closed and what its tasks wrote removed, and the error comes back in one line (ours with its
    class, so the exit code holds)."""
    # over Connect the client cannot wait for a stopped job's tasks: they may still run
    with job.removed_on_failure(table, lambda: not is_connect(spark)), \
            stoppable_job(spark, f"memwal-{job.folder.rsplit('/', 1)[-1]}"):
        return Output.of(rows_of(frame.toArrow().to_batches()))


__all__ = ["SparkMergeEngine"]
