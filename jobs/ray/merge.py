"""The Ray merge engine: the Spark engine's plan, tasks and commit paths, its stages as Ray tasks.

The tasks are :mod:`memwal.tasks.merge_tasks`' (the local engine's own reducer inside), the
shapes and the driver's half :class:`memwal.tasks.merge_job.TaskMergeEngine`'s: **by shard**
(whole shards per task, no shuffle) or the **keyed shuffle** (read tasks packed by bytes, rows
hash-partitioned by key, one reduce task per partition), then, driverless, the **retire** stage
(one deletion file per base fragment). What only Ray does here is how rows reach the next
stage: a task returns one object per partition of the next stage (``num_returns``), and each
task of that stage takes its partition's objects from every task before it. Bucket blobs and
retired offsets go from worker to worker through Ray's object store; the driver holds their
references and gets only the small rows (the tasks' documents, key hashes, deletion files and
seconds), as the Spark driver does.

A failed or cancelled job's folder is closed and what its tasks wrote removed
(:meth:`memwal.tasks.merge_job.MergeJob.remove_written`); a task cancelled while it wrote
removes its own files when it finds the folder closed. Why Ray this way: docs/decisions/0066-ray-engine.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from memwal.ray.runner import RayRunner

from memwal.core import steps
from memwal.merge.model import MergePlan
from memwal.table import Table
from memwal.tasks.merge_job import MergeJob, Output, TaskMergeEngine, schema_of
from memwal.tasks.merge_tasks import (
    OFFSETS,
    ROWS,
    Item,
    Options,
    Payload,
    Row,
    Target,
    batch,
    read_buckets,
    reduce_buckets,
    reduce_shards,
    retire_fragments,
    rows_of,
)


def split(rows: Iterable[Row], kind: str, parts: int) -> list[pa.RecordBatch]:
    """A task's rows as the objects it returns: first those for the driver, then one batch per
    partition of the next stage holding its rows of ``kind`` (``part`` modulo ``parts``)."""
    head: list[Row] = []
    by_part: list[list[Row]] = [[] for _ in range(parts)]
    for row in rows:
        if row[1] == kind and parts:
            by_part[row[0] % parts].append(row)
        else:
            head.append(row)
    return [batch(head), *(batch(r) for r in by_part)]


def _returned(objects: list[pa.RecordBatch]) -> Any:
    """What a task with ``num_returns=len(objects)`` returns (one object: itself, not a list)."""
    return objects[0] if len(objects) == 1 else objects


def _reduce_shard_task(payloads: list[Payload], plan: MergePlan, schema_bytes: bytes, options: Options,
                       target: Target, retire_parts: int, barrier: str | None) -> Any:
    steps.step("ray.merge.read-task", barrier=barrier)
    rows = reduce_shards(payloads, plan, schema_of(schema_bytes), options, target)
    return _returned(split(rows, OFFSETS, retire_parts))


def _read_task(items: list[Item], schema_bytes: bytes, options: Options, shard_ids: list[str], pk: list[str],
               parts: int, barrier: str | None) -> Any:
    steps.step("ray.merge.read-task", barrier=barrier)
    return _returned(split(read_buckets(items, schema_of(schema_bytes), options, shard_ids, pk, parts), ROWS, parts))


def _reduce_bucket_task(plan: MergePlan, schema_bytes: bytes, options: Options, target: Target, retire_parts: int,
                        *buckets: pa.RecordBatch) -> Any:
    rows = reduce_buckets(rows_of(buckets), plan, schema_of(schema_bytes), options, target)
    return _returned(split(rows, OFFSETS, retire_parts))


def _retire_task(target: Target, options: Options, barrier: str | None, *offsets: pa.RecordBatch) -> pa.RecordBatch:
    steps.step("ray.merge.retire-task", barrier=barrier)  # the upserts are written: a test may hold here
    return batch(list(retire_fragments(rows_of(offsets), target, options)))


class RayMergeEngine(TaskMergeEngine):
    """Computes a merge batch in Ray tasks (see the module docstring)."""

    name = "ray"

    def __init__(self, runner: RayRunner | None = None, **sizes: Any) -> None:
        super().__init__(**sizes)
        self.runner = runner or RayRunner()

    def _parallelism(self) -> int:
        return self.runner.parallelism()

    def _by_shard(self, table: Table, job: MergeJob, tasks: list[list[Payload]]) -> Output:
        import ray

        barrier, parts = steps.barrier_for_tasks(), job.retire_parts
        reduce = ray.remote(_reduce_shard_task).options(num_returns=1 + parts)
        plan, options = ray.put(job.plan), job.options
        outs = [reduce.remote(t, plan, job.schema_bytes, options, job.target, parts, barrier) for t in tasks]
        return self._finish(table, job, [_refs(o) for o in outs])

    def _shuffled(self, table: Table, job: MergeJob, tasks: list[list[Item]], parts: int) -> Output:
        import ray

        barrier, plan, options = steps.barrier_for_tasks(), job.plan, job.options
        read = ray.remote(_read_task).options(num_returns=1 + parts)
        reads = [_refs(read.remote(t, job.schema_bytes, options, list(plan.shard_ids), list(plan.primary_key), parts,
                                   barrier)) for t in tasks]
        reduce = ray.remote(_reduce_bucket_task).options(num_returns=1 + job.retire_parts)
        shared = ray.put(plan)
        reduced = [_refs(reduce.remote(shared, job.schema_bytes, options, job.target, job.retire_parts,
                                       *(r[1 + p] for r in reads))) for p in range(parts)]
        return self._finish(table, job, reduced, [r[0] for r in reads])

    def _finish(self, table: Table, job: MergeJob, reduced: list[list[Any]], heads: list[Any] | None = None) -> Output:
        """The retire stage after ``reduced`` (driverless), then every task's rows for the driver;
        if the job fails or is cancelled, what its tasks wrote is removed."""
        import ray

        heads = [*(heads or []), *(r[0] for r in reduced)]
        if job.retire_parts:
            retire = ray.remote(_retire_task)
            barrier = steps.barrier_for_tasks()
            heads += [retire.remote(job.target, job.options, barrier, *(r[1 + p] for r in reduced))
                      for p in range(job.retire_parts)]
        # ``heads`` holds one reference of every task (ray.wait refuses a reference twice)
        with job.removed_on_failure(table, lambda: _stopped(heads)), \
                self.runner.stoppable(f"memwal-{job.folder.rsplit('/', 1)[-1]}"):
            return Output.of(rows_of(self.runner.get(heads)))


def _refs(returned: Any) -> list[Any]:
    """A task's returned references as a list (one: Ray hands the reference itself)."""
    return returned if isinstance(returned, list) else [returned]


def _stopped(refs: list[Any], seconds: float = 10.0) -> bool:
    """Every task behind ``refs`` cancelled (its worker killed); whether all have ended within
    ``seconds``."""
    import ray

    for ref in refs:
        ray.cancel(ref, force=True)
    _, pending = ray.wait(refs, num_returns=len(refs), timeout=seconds)
    return not pending


__all__ = ["RayMergeEngine"]
