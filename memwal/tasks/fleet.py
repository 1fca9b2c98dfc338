"""The fleet as tasks: many small tables as tasks of one job, large ones on the driver.

:class:`memwal.fleet.run.TableRunner` for ``memwal fleet run --engine spark`` (or ``ray``). A
small table's work is one task (the table's cycle with the local engine inside the task, as
``memwal cycle`` runs it): a fleet of thousands of small tables spreads over the cluster's
cores in one job. A table whose unmerged bytes pass the policy's ``spark_min_bytes``
(``TableWork.large``) runs on the driver through the engine's per-table engines, its own
stages spread over the same workers. A task returns its cycle's result as plain data; a task
that fails (a worker lost) is the engine's to retry, and every job it ran is a ``memwal <job>``
run with its leases and fences, so a retried task redoes nothing twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from memwal.compact.engine import one_task_at_a_time
from memwal.cycle import CycleResult
from memwal.fleet.run import TableWork, run_table_work
from memwal.tasks import TaskRunner


def _task(work: TableWork) -> dict[str, Any]:
    """One small table in a task, the local engine inside (its compaction's rewrites one at a
    time: the task has one core of the cluster's)."""
    local = {job: {**opts, "engine": "local"} for job, opts in work.options.items()}
    with one_task_at_a_time():
        return run_table_work(replace(work, options=local)).to_dict()


class TaskTableRunner:
    """A :class:`memwal.fleet.run.TableRunner` whose small tables are tasks of ``runner``."""

    def __init__(self, runner: TaskRunner) -> None:
        self.runner = runner
        self.name = runner.name

    def run(self, work: Sequence[TableWork], workers: int, deadline: float | None) -> Iterator[CycleResult]:
        """Small tables as one job (a task each), large ones on the driver meanwhile
        (``workers`` of them at once); none started after ``deadline``."""
        if deadline is not None and time.monotonic() >= deadline:
            return
        small = [w for w in work if not w.large]
        large = [w for w in work if w.large]
        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="memwal-fleet-large") as pool:
            big = [pool.submit(run_table_work, w) for w in large]
            if small:
                docs = self.runner.run_tasks(small, lambda w: [_task(w)])
                yield from (CycleResult.from_dict(d) for d in docs)
            for f in big:
                yield f.result()


__all__ = ["TaskTableRunner"]
