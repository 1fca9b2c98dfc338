"""The Spark catch-up engine: scalar index rebuilds split by fragment groups over executors.

A rebuild of a large scalar index is the expensive case: executors each build an
uncommitted segment over a group of fragments (``create_index_uncommitted``) and the
driver publishes them in one commit (``commit_existing_index_segments``), after which
Lance records the catch-up because the segments cover every fragment. Incremental
optimisation and vector retraining (one shared training step) run on the driver through
the local engine, which Lance already parallelises within the process.
"""

from __future__ import annotations

import pickle

import lance
from memwal.spark.session import active_or_local
from pyspark.sql import SparkSession

from memwal.catchup import RETRAIN, CatchupPlan, IndexPlan, LocalCatchupEngine
from memwal.table import Table


class SparkCatchupEngine:
    name = "spark"

    def __init__(self, spark: SparkSession, *, fragments_per_task: int = 8) -> None:
        self.spark = spark
        self.fragments_per_task = fragments_per_task

    @classmethod
    def from_active_or_local(cls) -> SparkCatchupEngine:
        return cls(active_or_local())

    def run(self, table: Table, plan: CatchupPlan, work: list[IndexPlan]) -> None:
        distributed = [i for i in work if i.action == RETRAIN and not i.is_vector]
        rest = [i for i in work if i not in distributed]
        for ip in distributed:
            self._rebuild_scalar(table, ip)
        if rest:
            LocalCatchupEngine().run(table, plan, rest)

    def _rebuild_scalar(self, table: Table, ip: IndexPlan) -> None:
        ds = table.dataset()
        meta = next(i for i in ds.describe_indices() if i.name == ip.index_name)
        column = meta.field_names[0]
        index_type = _scalar_type(ip.index_type)
        version = ds.version
        fragments = [f.fragment_id for f in ds.get_fragments()]
        groups = [fragments[i : i + self.fragments_per_task] for i in range(0, len(fragments), self.fragments_per_task)]
        uri, options, name = table.uri, dict(table.storage_options), ip.index_name

        def build(group: list[int]) -> bytes:
            d = lance.dataset(uri, version=version, storage_options=options or None)
            seg = d.create_index_uncommitted(column, index_type, name=name, fragment_ids=group, replace=True)
            return pickle.dumps(seg)

        blobs = self.spark.sparkContext.parallelize(groups, max(1, len(groups))).map(build).collect()
        segments = [pickle.loads(b) for b in blobs]
        lance.dataset(uri, version=version, storage_options=options or None).commit_existing_index_segments(
            name, column, segments
        )


def _scalar_type(stats_type: str) -> str:
    """Lance's statistics name (e.g. 'BTree') as the create_index type name ('BTREE')."""
    return {"btree": "BTREE", "bitmap": "BITMAP", "labellist": "LABEL_LIST", "inverted": "INVERTED",
            "ngram": "NGRAM", "zonemap": "ZONEMAP", "bloomfilter": "BLOOMFILTER"}.get(
        stats_type.replace("_", "").lower(), stats_type.upper())
