"""Where a compaction's rewrite tasks run: the :class:`CompactEngine` protocol, and Lance's tasks
in-process (:class:`LocalCompactEngine`). The task engine (``memwal.tasks.compact``) runs
one Spark or Ray task per Lance task and satisfies the same protocol. An engine only rewrites: the
one commit, with progress kept, is the driver's (:mod:`memwal.compact.execute`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Protocol

from lance.optimize import CompactionTask, RewriteResult

from memwal.compact.plan import CompactPlan
from memwal.core import steps
from memwal.table import Table


class CompactEngine(Protocol):
    """Runs a plan's Lance tasks (local: in-process; spark: one Spark task per Lance task)."""

    name: str

    def run_tasks(self, table: Table, plan: CompactPlan) -> list[RewriteResult]: ...


#: Lance's rewrite tasks the local engine runs at once in this context (None: the plan's
#: ``num_threads``, else the machine's cores): see :func:`one_task_at_a_time`.
_WIDTH: ContextVar[int | None] = ContextVar("memwal_compact_width", default=None)


@contextlib.contextmanager
def one_task_at_a_time() -> Iterator[None]:
    """The local engine runs Lance's rewrite tasks one after the other in the block: where a
    cluster runs the caller as one task of one core (a fleet's small table in a Spark or Ray task),
    its scheduler, not the compaction, spreads the work over the cores, and each task holds the
    rows of one rewrite in memory, not one per core."""
    token = _WIDTH.set(1)
    try:
        yield
    finally:
        _WIDTH.reset(token)


class LocalCompactEngine:
    """Lance's tasks in this process, ``num_threads`` at a time (Lance's own option, as its
    ``compact_files`` runs them: the machine's cores unless the plan's options say otherwise;
    one inside :func:`one_task_at_a_time`).
    Each task reads and writes its own fragments, and a task's own work keeps about one core
    busy: one at a time left every other core idle (1.07 cores over a 64-fragment compaction)."""

    name = "local"

    @classmethod
    def from_active_or_local(cls) -> LocalCompactEngine:
        return cls()

    def run_tasks(self, table: Table, plan: CompactPlan) -> list[RewriteResult]:
        ds = table.dataset(plan.read_version)
        tasks = plan.lance_tasks
        width = min(len(tasks), _WIDTH.get() or plan.options.get("num_threads") or os.cpu_count() or 1)

        def rewrite(task: CompactionTask) -> RewriteResult:
            steps.step("local.compact.task")
            return task.execute(ds)

        if width <= 1:
            return [rewrite(task) for task in tasks]
        # not memwal.core.pool.ordered_map: its window of 2 x threads waits for the oldest call before
        # it starts another, and a rewrite takes seconds (32M rows in 29 tasks, medians of 3: 7.73 s
        # through it against 7.23 s so); a result here is a few fragments' metadata. As there,
        # nothing new starts after a failure.
        with ThreadPoolExecutor(max_workers=width, thread_name_prefix="memwal-compact") as pool:
            running = [pool.submit(rewrite, task) for task in tasks]
            try:
                return [f.result() for f in running]
            finally:
                for f in running:
                    f.cancel()
