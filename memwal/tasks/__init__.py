"""Work spread as tasks over a distributed engine (Spark, Ray): the same plans as the local
engines, every commit the driver's.

An engine brings a :class:`TaskRunner` (how a list of payloads becomes tasks, and how an
operator's cancel stops them); the engines here are written against it once: compaction
(:mod:`.compact`: one task per Lance compaction task), GC (:mod:`.gc`: one task per shard),
the snapshot refresh (:mod:`.snapshot`: shard manifests read in parallel), index catch-up
(:mod:`.catchup`: segments per fragment group) and the fleet (:mod:`.fleet`: small tables as
tasks). The merge's tasks (:mod:`.merge_tasks`) and its driver half (:mod:`.merge_job`) are
shared too; how its stages reach one another (a shuffle, the retire stage) is each engine's own.

Nothing here imports an engine: tasks get plain data (URIs, storage options, pickled Lance
task objects), so executors and Ray workers need only memwal-jobs and pylance installed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeVar

if TYPE_CHECKING:
    from memwal.table import Table
    from memwal.tasks.catchup import TaskCatchupEngine
    from memwal.tasks.compact import TaskCompactEngine
    from memwal.tasks.fleet import TaskTableRunner
    from memwal.tasks.gc import TaskGcEngine
    from memwal.tasks.snapshot import TaskManifestReader

    #: One action's task engine (each satisfies that action's engine protocol in the core).
    TaskEngine: TypeAlias = (TaskCatchupEngine | TaskCompactEngine | TaskManifestReader | TaskGcEngine
                             | TaskTableRunner)

P = TypeVar("P")
R = TypeVar("R")


class TaskRunner(Protocol):
    """What an engine gives the task engines: its name (``spark``, ``ray``), its cores, a job of
    one task per payload, and a block an operator's cancel stops."""

    name: str

    def parallelism(self) -> int:
        """The tasks that run at once by default (the cluster's cores)."""
        ...

    def run_tasks(self, payloads: Sequence[P], fn: Callable[[P], Iterable[R]]) -> list[R]:
        """``fn(payload)`` in a task of its own for each payload; what each yields, in payload order."""
        ...

    def stoppable(self, name: str) -> AbstractContextManager[str]:
        """The tasks this block starts are stopped when an operator's cancel reaches the run
        (:func:`memwal.lease.cancel.stoppable`); a failure comes out in one line."""
        ...


def task_engine(action: str, runner: TaskRunner) -> TaskEngine:
    """The task engine of ``action`` (``catchup``, ``compact``, ``snapshot``, ``gc``, ``fleet``) on
    ``runner``: the one table of them every distributed engine hands the core."""
    from memwal.tasks.catchup import TaskCatchupEngine
    from memwal.tasks.compact import TaskCompactEngine
    from memwal.tasks.fleet import TaskTableRunner
    from memwal.tasks.gc import TaskGcEngine
    from memwal.tasks.snapshot import TaskManifestReader

    kinds: dict[str, Callable[[TaskRunner], TaskEngine]] = {
        "catchup": TaskCatchupEngine, "compact": TaskCompactEngine, "snapshot": TaskManifestReader,
        "gc": TaskGcEngine, "fleet": TaskTableRunner}
    return kinds[action](runner)


def task_uri(table: Table) -> str:
    """The table's URI as tasks must get it: a local path made absolute (an executor's working
    directory is not the driver's: a Spark Connect server's is a folder of the session's)."""
    return table.store.uri_for("")


def chunks(items: Sequence[P], n: int) -> list[list[P]]:
    """``items`` in ``n`` contiguous chunks of near-equal size (none empty)."""
    n = max(1, min(n, len(items)))
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (i < extra)
        out.append(list(items[start:end]))
        start = end
    return [c for c in out if c]
