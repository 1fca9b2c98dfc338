"""The Spark compaction engine: one Spark task per Lance compaction task.

The driver plans (``Compaction.plan``) and commits once (``Compaction.commit``); executors
only rewrite fragments. Lance's task and result objects are picklable, so they travel as
bytes: each executor opens the table at the plan's read version, runs its task and returns
the ``RewriteResult`` (pickled: :func:`memwal.spark.engine.frames.run_tasks`). Nothing assumes
local mode: the URI, version and storage options travel in the closure. The tasks run under a
tag an operator's cancel interrupts (:func:`memwal.spark.engine.tags.stoppable_job`): nothing is committed then, and the
fragments they wrote are named by no version (``gc --expire-versions``, Lance's cleanup,
removes such files past its unverified window).
"""

from __future__ import annotations

import pickle
import uuid
from typing import TYPE_CHECKING

import lance
from lance.optimize import RewriteResult
from memwal.spark.engine.frames import run_tasks, task_uri
from memwal.spark.engine.session import active_or_local
from memwal.spark.engine.tags import stoppable_job

from memwal.compact import CompactPlan
from memwal.core import steps
from memwal.table import Table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SparkCompactEngine:
    name = "spark"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    @classmethod
    def from_active_or_local(cls) -> SparkCompactEngine:
        return cls(active_or_local())

    def run_tasks(self, table: Table, plan: CompactPlan) -> list[RewriteResult]:
        if not plan.lance_tasks:
            return []
        uri, version, options = task_uri(table), plan.read_version, dict(table.storage_options)
        blobs = [pickle.dumps(task) for task in plan.lance_tasks]
        barrier = steps.barrier_for_tasks()  # a test holding the stage travels with the tasks

        def rewrite(blob: bytes) -> list[RewriteResult]:
            steps.step("spark.compact.task", barrier=barrier)
            ds = lance.dataset(uri, version=version, storage_options=options or None)
            return [pickle.loads(blob).execute(ds)]

        with stoppable_job(self.spark, f"memwal-compact-{uuid.uuid4().hex[:12]}"):
            return run_tasks(self.spark, blobs, rewrite)
