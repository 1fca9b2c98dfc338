"""The Spark engine in local mode: same plan, same table as the local engine; spark-submit works."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from jobs.spark_engine import SparkMergeEngine
from memwal.demo_data import Workload
from memwal.merge import run_merge
from memwal.table import open_table
from tests.conftest import table_rows

ROOT = Path(__file__).resolve().parent.parent


def test_spark_engine_gives_the_same_table_as_the_local_engine(make_table, spark, tmp_path):
    table, model = make_table(Workload(base_rows=400, shards=3, generations=5, rows_per_generation=50, seed=11))
    copy = tmp_path / "copy"
    shutil.copytree(table.uri, copy)
    local = run_merge(table)
    other = open_table(str(copy))
    distributed = run_merge(other, engine=SparkMergeEngine(spark, partitions=4))
    assert distributed.engine == "spark"
    assert table_rows(other) == table_rows(table) == model.sorted_rows()
    assert other.manifest().compacted == table.manifest().compacted
    key = lambda r: r.shard_id  # noqa: E731
    assert sorted(local.shards, key=key) == sorted(distributed.shards, key=key)
    staging = copy / "_mem_wal" / "_staging"
    assert not staging.exists() or not any(staging.rglob("*.lance"))


def test_spark_submit_entry_point(make_table, tmp_path):
    table, model = make_table()
    result = tmp_path / "result.json"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=false",
            str(ROOT / "jobs/merge.py"),
            table.uri,
            "--max-generations",
            "2",
            "--result-file",
            str(result),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(result.read_text())
    assert doc["engine"] == "spark"
    assert {(s["from_generation"], s["to_generation"]) for s in doc["shards"]} == {(1, 2)}
    assert set(table.manifest().compacted.values()) == {2}
    run_merge(table)
    assert table_rows(table) == model.sorted_rows()


def test_spark_engine_refuses_a_key_in_two_shards(make_table, spark):
    import pytest

    from memwal.errors import MemWalError
    from tests.test_merge import write_key_to_wrong_shard

    table, _ = make_table()
    key = write_key_to_wrong_shard(table)
    with pytest.raises(MemWalError, match=f"'id': {key}.*more than one shard"):
        run_merge(table, engine=SparkMergeEngine(spark, partitions=2))
    assert table.manifest().compacted == {}
