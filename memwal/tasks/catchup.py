"""Index catch-up as tasks: index rebuilds split by fragment groups over the engine's workers.

A rebuild of a large index is the expensive case: tasks each build an uncommitted
segment over a group of fragments (``create_index_uncommitted``) and the driver publishes
them in one commit (``commit_existing_index_segments``), after which Lance records the
catch-up because the segments cover every fragment (observed for BTREE, INVERTED and
IVF_PQ indexes with pylance 14.0.2: that commit writes ``index_catchup``).

* Scalar indexes need no training: each segment is built on its own, BTREE as it is and
  INVERTED with the index's own tokenizer settings (read from its statistics). Other scalar
  types are rebuilt on the driver.
* Vector indexes (IVF_PQ, IVF_FLAT) are trained once on the driver (Lance's
  ``IndicesBuilder``: IVF centroids, and the PQ codebook), with the index's own partition
  count, sub-vectors and metric; every task then builds its segment with that shared
  model, so the segments form one index. A table too small to sample (fewer than 2 rows
  per centroid, or per PQ code) and other vector types are retrained on the driver.

Incremental optimisation (adding the unindexed fragments as a delta) runs on the driver
through the local engine, which Lance already parallelises within the process. The segment
builds run in a block an operator's cancel stops (:meth:`memwal.tasks.TaskRunner.stoppable`):
nothing is committed then.
"""

from __future__ import annotations

import uuid
from typing import Any

import lance
from lance.indices import IndicesBuilder

from memwal.catchup import RETRAIN, CatchupPlan, IndexPlan, LocalCatchupEngine
from memwal.catchup.engine import Fence
from memwal.core import steps
from memwal.history import run as history
from memwal.table import Table
from memwal.tasks import TaskRunner, task_uri


class TaskCatchupEngine:
    """A :class:`memwal.catchup.CatchupEngine` whose index rebuilds run in tasks of ``runner``."""

    def __init__(self, runner: TaskRunner, *, fragments_per_task: int = 8) -> None:
        self.runner = runner
        self.name = runner.name
        self.fragments_per_task = fragments_per_task

    def run(self, table: Table, plan: CatchupPlan, work: list[IndexPlan], fence: Fence = None) -> list[int]:
        """As :meth:`LocalCatchupEngine.run`: the versions committed, ``fence`` before each."""
        rest, committed = [], []
        for ip in work:
            if ip.action != RETRAIN:
                rest.append(ip)
            elif not ip.is_vector and (options := scalar_options(table.dataset(), ip.index_name)) is not None:
                committed.append(self._rebuild(table, ip, _scalar_type(ip.index_type), options, fence))
            elif (options := vector_model(table.dataset(), ip.index_name)) is not None:
                committed.append(self._rebuild(table, ip, options.pop("index_type"), options, fence))
            else:
                rest.append(ip)
        if rest:
            committed += LocalCatchupEngine().run(table, plan, rest, fence)
        return committed

    def _rebuild(self, table: Table, ip: IndexPlan, index_type: str, options: dict[str, Any], fence: Fence) -> int:
        """Segments over fragment groups in tasks, one commit on the driver."""
        ds = table.dataset()
        meta = next(i for i in ds.describe_indices() if i.name == ip.index_name)
        column = meta.field_names[0]
        version = ds.version
        fragments = [f.fragment_id for f in ds.get_fragments()]
        groups = [fragments[i : i + self.fragments_per_task] for i in range(0, len(fragments), self.fragments_per_task)]
        uri, storage, name = task_uri(table), dict(table.storage_options), ip.index_name
        barrier = steps.barrier_for_tasks()  # a test holding the stage travels with the tasks
        step = f"{self.name}.catchup.task"

        def build(group: list[int]) -> list[Any]:
            steps.step(step, barrier=barrier)
            d = lance.dataset(uri, version=version, storage_options=storage or None)
            return [d.create_index_uncommitted(column, index_type, name=name, fragment_ids=group, replace=True,
                                               **options)]

        with self.runner.stoppable(f"memwal-catchup-{uuid.uuid4().hex[:12]}"):
            segments = self.runner.run_tasks(groups, build)
        if fence is not None:
            fence()
        committer = lance.dataset(uri, version=version, storage_options=storage or None)
        committer.commit_existing_index_segments(name, column, segments)
        # the running job's the moment it lands: a fence before the next index raises, and the
        # returned list is lost with it (issue 64: the history named it 'external')
        history.committed(table, committer.version)
        return committer.version


def scalar_options(ds: lance.LanceDataset, name: str) -> dict[str, Any] | None:
    """The ``create_index_uncommitted`` arguments that rebuild a scalar index as it was built;
    None for a type whose segments we do not build on executors (they are rebuilt on the
    driver: e.g. NGRAM segments must be merged before their commit)."""
    stats = ds.stats.index_stats(name)
    kind = _scalar_type(str(stats.get("index_type", "")))
    if kind == "BTREE":
        return {}
    if kind == "INVERTED":  # tokenizer settings, or the rebuilt index would tokenize differently
        params = dict(((stats.get("segments") or stats.get("indices") or [{}])[0]).get("params") or {})
        if params.pop("lance_tokenizer", "text") not in (None, "text"):
            return None  # not a create_index argument: only the default can be kept
        return {k: v for k, v in params.items() if v is not None}
    return None


def vector_model(ds: lance.LanceDataset, name: str) -> dict[str, Any] | None:
    """The ``create_index_uncommitted`` arguments that make every segment of a vector index
    share one model: trained here, on the driver, with the index's own parameters. None
    when the type has no shared model we know how to train, or the table is too small."""
    stats = ds.stats.index_stats(name)
    index_type = str(stats.get("index_type", "")).upper()
    segment = (stats.get("segments") or stats.get("indices") or [{}])[0]
    column = next(i for i in ds.describe_indices() if i.name == name).field_names[0]
    partitions = int(segment.get("num_partitions", 0))
    metric = str(segment.get("metric_type", "l2")).lower()
    rows = ds.count_rows()
    if index_type not in ("IVF_PQ", "IVF_FLAT") or partitions < 1:
        return None
    sample = min(256, rows // partitions)
    builder = IndicesBuilder(ds, column)
    options: dict[str, Any] = {"index_type": index_type, "metric": metric, "num_partitions": partitions}
    if index_type == "IVF_PQ":
        sub = segment.get("sub_index") or {}
        bits = int(sub.get("nbits", 8))
        sample = min(sample, rows // 2**bits)
        if sample < 2:
            return None
        subvectors = int(sub["num_sub_vectors"])
        ivf = builder.train_ivf(partitions, distance_type=metric, sample_rate=sample)
        pq = builder.train_pq(ivf, subvectors, sample_rate=sample, num_bits=bits)
        options.update(ivf_centroids=ivf.centroids, pq_codebook=pq.codebook, num_sub_vectors=subvectors)
    else:
        if sample < 2:
            return None
        options["ivf_centroids"] = builder.train_ivf(partitions, distance_type=metric, sample_rate=sample).centroids
    return options


def _scalar_type(stats_type: str) -> str:
    """Lance's statistics name (e.g. 'BTree') as the create_index type name ('BTREE')."""
    return {"btree": "BTREE", "bitmap": "BITMAP", "labellist": "LABEL_LIST", "inverted": "INVERTED",
            "ngram": "NGRAM", "zonemap": "ZONEMAP", "bloomfilter": "BLOOMFILTER"}.get(
        stats_type.replace("_", "").lower(), stats_type.upper())
