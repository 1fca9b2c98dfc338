"""Compaction through the Spark engine (local mode): same table as the local engine; spark-submit works."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import memwal
from memwal.table import open_table
from tests.conftest import table_rows
from tests.helpers import ROOT, spark_submit
from tests.integration.test_compact import build_many_merged


def test_spark_engine_gives_the_same_table_as_the_local_engine(spark_session, tmp_path):
    table, model = build_many_merged(str(tmp_path / "local"))
    shutil.copytree(table.uri, tmp_path / "spark", symlinks=True)
    other = open_table(str(tmp_path / "spark"))
    tasks = len(memwal.open(other.uri).compact(dry_run=True).value.tasks)
    assert tasks >= 1

    local = memwal.open(table.uri).compact().value
    distributed = memwal.open(other.uri).compact(engine="spark").value

    assert distributed.engine == "spark" and distributed.version is not None
    assert table_rows(other) == table_rows(table) == model.sorted_rows()
    for key in ("fragments_before", "fragments_after", "fragments_removed", "fragments_added",
                "deletions_materialized"):
        assert getattr(distributed, key) == getattr(local, key), key
    assert other.manifest().compacted == table.manifest().compacted
    assert other.manifest().index_catchup == table.manifest().index_catchup == {
        "id_idx": table.manifest().compacted, "vec_idx": table.manifest().compacted}
    assert all(i.recorded for i in distributed.indexes)


def test_spark_submit_compact(tmp_path):
    table, model = build_many_merged(str(tmp_path / "t"))
    before = table.manifest()
    out = tmp_path / "result.json"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(spark_submit("--master", "local[2]", "--conf", "spark.ui.enabled=false",
                                       str(ROOT / "jobs/compact.py"), table.uri, "--result-file", str(out)),
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["engine"] == "spark" and doc["version"] is not None
    assert doc["fragments_after"] < doc["fragments_before"]
    assert all(i["recorded"] for i in doc["indexes"])
    assert table_rows(table) == model.sorted_rows()
    assert table.manifest().index_catchup == before.index_catchup
