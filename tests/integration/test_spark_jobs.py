"""Catch-up and GC through the Spark engines (local mode), and their spark-submit entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from memwal.spark.engine.runner import SparkRunner

import memwal
from memwal.catchup import CatchupThresholds, run_catchup
from memwal.demo import shard_ids_for
from memwal.table.shards import list_generation_dirs
from memwal.tasks.catchup import TaskCatchupEngine
from tests.conftest import SMALL, lsm_rows, table_rows
from tests.helpers import ROOT, spark_submit
from tests.integration.test_gc import expire_all

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)


def test_spark_scalar_rebuild_in_fragment_groups_records_catchup(make_table, spark_session):
    table, model = make_table()
    t = memwal.open(table.uri)
    assert t.merge().ok
    plan = t.catchup(indexes=["id_idx"], max_unindexed_fraction=0.0, dry_run=True).value
    assert plan.indexes[0].action == "retrain" and not plan.indexes[0].is_vector
    fragments = len(table.dataset().get_fragments())
    assert fragments >= 2
    # internal entry: one segment per fragment (fragments_per_task=1) is no user option
    engine = TaskCatchupEngine(SparkRunner(spark_session), fragments_per_task=1)
    result = run_catchup(table, engine=engine, indexes=["id_idx"],
                         thresholds=CatchupThresholds(max_unindexed_fraction=0.0))
    assert result.all_recorded and result.engine == "spark"
    stats = table.dataset().stats.index_stats("id_idx")
    assert stats["num_unindexed_rows"] == 0
    assert len(stats["num_indexed_rows_per_delta"]) == fragments  # one segment per fragment group
    assert table.manifest().index_catchup["id_idx"] == table.manifest().compacted
    hits = table.dataset().to_table(filter="id = 5")
    assert hits.num_rows == (1 if 5 in model.rows else 0)
    assert table_rows(table) == model.sorted_rows()


def test_spark_gc_spreads_shards_over_executors(make_table, spark_session):
    table, model = make_table()
    t = memwal.open(table.uri)
    assert t.merge().ok and t.catchup().ok
    expire_all(table)
    result = t.gc(grace_seconds=0, writer_idle_seconds=0, engine="spark").to_dict()
    assert result["engine"] == "spark" and len(result["deleted"]) == 12 and result["wal_entries_deleted"] > 0
    assert all(not list_generation_dirs(table.store, s) for s in shard_ids_for(SMALL))
    assert lsm_rows(table) == model.sorted_rows()


def test_spark_submit_catchup_and_gc(make_table, tmp_path):
    table, model = make_table()
    assert memwal.open(table.uri).merge().ok
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    docs = {}
    for job, extra in (("catchup", []), ("gc", ["--grace-seconds", "0", "--writer-idle-seconds", "0",
                                                "--expire-versions", "0"])):
        out = tmp_path / f"{job}.json"
        proc = subprocess.run(spark_submit("--master", "local[2]", "--conf", "spark.ui.enabled=false",
                                           str(ROOT / f"jobs/{job}.py"), table.uri, *extra, "--result-file", str(out)),
                              capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:]
        docs[job] = json.loads(out.read_text())
    assert docs["catchup"]["all_recorded"] is True and docs["catchup"]["engine"] == "spark"
    assert len(docs["gc"]["deleted"]) == 12 and docs["gc"]["engine"] == "spark"
    assert table_rows(table) == model.sorted_rows()


def test_a_failed_spark_task_is_one_line_naming_its_error(spark_session):
    """A task's Python error reaches the driver as one line naming it (not Py4J's text, not the
    JVM's trace); ours keep their class, so the exit code holds."""
    import pytest
    from memwal.spark.engine.frames import run_tasks
    from memwal.spark.engine.tags import stoppable_job

    from memwal.errors import BadInputError, MemWalError

    def boom(kind: str) -> list[int]:
        if kind == "ours":
            raise BadInputError("shard s1: a bad generation")
        raise ValueError("not a number: 'x'")

    with pytest.raises(MemWalError) as failed, stoppable_job(spark_session, "memwal-test-boom"):
        run_tasks(spark_session, ["theirs"], boom)
    assert str(failed.value) == "a Spark task failed: ValueError: not a number: 'x'"
    with pytest.raises(BadInputError, match=r"^shard s1: a bad generation$"), \
            stoppable_job(spark_session, "memwal-test-ours"):
        run_tasks(spark_session, ["ours"], boom)
