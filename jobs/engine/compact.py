"""The Spark compaction engine: one Spark task per Lance compaction task.

The driver plans (``Compaction.plan``) and commits once (``Compaction.commit``); executors
only rewrite fragments. Lance's task and result objects are picklable, so they travel as
bytes: each executor opens the table at the plan's read version, runs its task and returns
the pickled ``RewriteResult``. Nothing assumes local mode: the URI, version and storage
options travel in the closure.
"""

from __future__ import annotations

import pickle

import lance
from lance.optimize import RewriteResult
from memwal.spark.engine.session import active_or_local
from pyspark import SparkContext

from memwal.compact import CompactPlan
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

        def rewrite(blob: bytes) -> bytes:
            ds = lance.dataset(uri, version=version, storage_options=options or None)
            return pickle.dumps(pickle.loads(blob).execute(ds))

        results = self.sc.parallelize(blobs, len(blobs)).map(rewrite).collect()
        return [pickle.loads(r) for r in results]
