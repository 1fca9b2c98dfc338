"""The snapshot refresh as tasks: shard manifests read in parallel on the engine's workers.

The plan is the same as the local engine's (memwal.snapshot); only the reads move: the
driver lists the shard ids, chunks of them are read by tasks (each task opens the
table's store from the URI and storage options carried in the closure and reads its
shards' latest manifests, a few threads per task since object-store reads are latency
bound), and the decoded snapshot rows come back to the driver, which encodes the Lance
file and makes the guarded commit. Nothing assumes local mode.

A broken shard (:class:`ShardManifestError`) comes back from its task as data, not as an
exception: an engine hands the driver an exception raised in a task wrapped in its own
traces (Spark's JVM and Python ones, Ray's), while the local engine's one-line error names the shard. The
driver raises the same error the local engine would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from memwal.snapshot.format import FieldColumn, ShardRow
from memwal.table import Table
from memwal.table.shards import ShardManifestError
from memwal.tasks import TaskRunner, chunks, task_uri

#: Threads per task reading manifests.
TASK_THREADS = 8
#: Shards per task when the number of partitions is not given.
SHARDS_PER_TASK = 64


@dataclass(frozen=True)
class BrokenShard:
    """A shard whose latest manifest a task could not establish, sent to the driver as a row."""

    shard_id: str
    reason: str
    detail: str

    @classmethod
    def of(cls, exc: ShardManifestError) -> BrokenShard:
        return cls(exc.shard_id, exc.reason, str(exc).removeprefix(f"shard {exc.shard_id}: "))

    def error(self) -> ShardManifestError:
        return ShardManifestError(self.shard_id, self.reason, self.detail)


def _read_partition(uri: str, options: dict[str, str], columns: list[FieldColumn],
                    threads: int) -> Callable[[Iterable[str]], list[ShardRow | BrokenShard]]:
    def run(ids: Iterable[str]) -> list[ShardRow | BrokenShard]:
        from memwal.snapshot.engine import LocalSnapshotEngine
        from memwal.table import Table as _Table

        shard_ids = list(ids)
        if not shard_ids:
            return []
        try:
            return list(LocalSnapshotEngine(threads).read_rows(_Table(uri, dict(options)), shard_ids, columns))
        except ShardManifestError as exc:
            return [BrokenShard.of(exc)]

    return run


class TaskManifestReader:
    """A :class:`memwal.snapshot.SnapshotEngine` that reads in tasks of ``runner``."""

    def __init__(self, runner: TaskRunner, *, partitions: int | None = None, task_threads: int = TASK_THREADS):
        self.runner = runner
        self.name = runner.name
        self.partitions = partitions
        self.task_threads = task_threads

    def read_rows(self, table: Table, shard_ids: list[str], columns: list[FieldColumn]) -> list[ShardRow]:
        if not shard_ids:
            return []
        n = self.partitions or max(
            1, min(len(shard_ids), max(self.runner.parallelism(), -(-len(shard_ids) // SHARDS_PER_TASK)))
        )
        fn = _read_partition(task_uri(table), dict(table.storage_options), list(columns), self.task_threads)
        out = self.runner.run_tasks(chunks(shard_ids, n), fn)
        broken = sorted((r for r in out if isinstance(r, BrokenShard)), key=lambda b: b.shard_id)
        if broken:  # the refresh publishes nothing, as with the local engine
            raise broken[0].error()
        return [r for r in out if isinstance(r, ShardRow)]
