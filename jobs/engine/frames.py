"""Spark jobs as DataFrames: the one shape every engine's stages take, the same on a classic
session and over Spark Connect (no RDD, no SparkContext, no JVM gateway on the client).

A job of ``n`` tasks is a range of ``n`` rows in ``n`` partitions (``spark.range(0, n, 1, n)``:
row ``i`` alone in partition ``i``, no shuffle), mapped by ``mapInArrow`` to the task's output;
a later stage that must see rows by key takes them through ``repartitionById`` (the key is the
partition, as an RDD's ``partitionBy`` had it); the driver gets the rows as one Arrow table
(``toArrow``). What a task needs travels in the function's closure, which PySpark pickles for
the executors on either kind of session.

Python objects (a Lance compaction result, a GC outcome, a snapshot row) come back pickled in
one binary column (:func:`run_tasks`): they come from our own code on the executors, as an
RDD's ``collect`` brought them before.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

P = TypeVar("P")
R = TypeVar("R")

#: The schema of :func:`run_tasks`' rows: one pickled result each.
PICKLED = "blob binary"
PICKLED_SCHEMA = pa.schema([("blob", pa.binary())])


def task_frame(spark: SparkSession, n: int) -> DataFrame:
    """``n`` rows in ``n`` partitions: row ``i`` (column ``id``) is task ``i``."""
    return spark.range(0, n, 1, max(1, n))


def task_ids(batches: Iterable[pa.RecordBatch]) -> Iterator[int]:
    """The task indices a ``mapInArrow`` function of :func:`task_frame` receives."""
    for batch in batches:
        yield from batch.column(0).to_pylist()


def pickled(results: Iterable[Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([pickle.dumps(r) for r in results], pa.binary())],
                                      schema=PICKLED_SCHEMA)


def unpickled(table: pa.Table) -> list[Any]:
    return [pickle.loads(b) for b in table.column(0).to_pylist()]


def run_tasks(spark: SparkSession, payloads: Sequence[P], fn: Callable[[P], Iterable[R]]) -> list[R]:
    """One Spark job of a task per payload: ``fn(payload)`` on an executor, every result it
    yields back on the driver, in task order."""
    if not payloads:
        return []
    items = list(payloads)

    def tasks(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for i in task_ids(batches):
            yield pickled(fn(items[i]))

    return unpickled(task_frame(spark, len(items)).mapInArrow(tasks, PICKLED).toArrow())
