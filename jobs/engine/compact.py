"""The Spark compaction engine: one Spark task per Lance compaction task.

The driver plans (``Compaction.plan``) and commits once (``Compaction.commit``); executors
only rewrite fragments. Lance's task and result objects are picklable, so they travel as
bytes: each executor opens the table at the plan's read version, runs its task and returns
the pickled ``RewriteResult``. Nothing assumes local mode: the URI, version and storage
options travel in the closure. The tasks run in a job group an operator's cancel stops
(:func:`memwal.spark.engine.job_groups.stoppable_group`): nothing is committed then, and the
fragments they wrote are named by no version (``gc --expire-versions``, Lance's cleanup,
removes such files past its unverified window).
"""

from __future__ import annotations

import pickle
import uuid

import lance
from lance.optimize import RewriteResult
from memwal.spark.engine.job_groups import stoppable_group
from memwal.spark.engine.session import active_or_local
from pyspark import SparkContext

from memwal.compact import CompactPlan
from memwal.core import steps
from memwal.table import Table


class SparkCompactEngine:
    name = "spark"

    def __init__(self, sc: SparkContext) -> None:
        self.sc = sc

    @classmethod
    def from_active_or_local(cls) -> SparkCompactEngine:
        return cls(active_or_local())

    def run_tasks(self, table: Table, plan: CompactPlan) -> list[RewriteResult]:
        if not plan.lance_tasks:
            return []
        uri, version, options = table.uri, plan.read_version, dict(table.storage_options)
        blobs = [pickle.dumps(task) for task in plan.lance_tasks]
        barrier = steps.barrier_for_tasks()  # a test holding the stage travels with the tasks

        def rewrite(blob: bytes) -> bytes:
            steps.step("spark.compact.task", barrier=barrier)
            ds = lance.dataset(uri, version=version, storage_options=options or None)
            return pickle.dumps(pickle.loads(blob).execute(ds))

        with stoppable_group(self.sc, f"memwal-compact-{uuid.uuid4().hex[:12]}"):
            results = self.sc.parallelize(blobs, len(blobs)).map(rewrite).collect()
        return [pickle.loads(r) for r in results]
