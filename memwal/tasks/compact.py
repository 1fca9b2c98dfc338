"""Compaction as tasks: one task per Lance compaction task.

The driver plans (``Compaction.plan``) and commits once (``Compaction.commit``); tasks only
rewrite fragments. Lance's task and result objects are picklable, so they travel as bytes:
each task opens the table at the plan's read version, runs its Lance task and returns the
``RewriteResult``. The tasks run in a block an operator's cancel stops
(:meth:`memwal.tasks.TaskRunner.stoppable`): nothing is committed then, and the fragments they
wrote are named by no version (``gc --expire-versions``, Lance's cleanup, removes such files
past its unverified window).
"""

from __future__ import annotations

import pickle
import uuid

import lance
from lance.optimize import RewriteResult

from memwal.compact import CompactPlan
from memwal.core import steps
from memwal.table import Table
from memwal.tasks import TaskRunner, task_uri


class TaskCompactEngine:
    """A :class:`memwal.compact.CompactEngine` whose Lance tasks run on ``runner``."""

    def __init__(self, runner: TaskRunner) -> None:
        self.runner = runner
        self.name = runner.name

    def run_tasks(self, table: Table, plan: CompactPlan) -> list[RewriteResult]:
        if not plan.lance_tasks:
            return []
        uri, version, options = task_uri(table), plan.read_version, dict(table.storage_options)
        blobs = [pickle.dumps(task) for task in plan.lance_tasks]
        barrier = steps.barrier_for_tasks()  # a test holding the stage travels with the tasks
        step = f"{self.name}.compact.task"

        def rewrite(blob: bytes) -> list[RewriteResult]:
            steps.step(step, barrier=barrier)
            ds = lance.dataset(uri, version=version, storage_options=options or None)
            return [pickle.loads(blob).execute(ds)]

        with self.runner.stoppable(f"memwal-compact-{uuid.uuid4().hex[:12]}"):
            return self.runner.run_tasks(blobs, rewrite)
