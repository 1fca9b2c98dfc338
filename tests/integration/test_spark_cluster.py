"""A real Spark standalone cluster: one master and one worker on 127.0.0.1, from the installed pyspark.

``spark-submit --master spark://127.0.0.1:PORT jobs/maintenance.py TABLE`` must run its tasks
in the worker's executor (a separate JVM and Python workers, not the driver), and leave the
table equal to the model. The cluster is started with ``spark-class`` (pyspark ships no
``sbin/start-master.sh``), on ports chosen free, and stopped in a ``finally``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import table_rows
from tests.helpers import ROOT, spark_submit
from tests.sparkcluster import cluster_env, spark_home, standalone_cluster, wait_for

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)


@pytest.mark.skipif(not os.path.exists(os.path.join(spark_home(), "bin", "spark-class")), reason="no spark-class")
def test_maintenance_job_on_a_standalone_cluster(make_table, tmp_path):
    table, model = make_table()
    with standalone_cluster(tmp_path) as (url, webui, work_dir):
        env = cluster_env()
        result = tmp_path / "result.json"
        proc = subprocess.run(
            spark_submit("--master", url,
                         "--conf", "spark.ui.enabled=false", "--conf", f"spark.pyspark.python={sys.executable}",
                         "--conf", "spark.executor.memory=1g", "--conf", "spark.cores.max=2",
                         str(ROOT / "jobs/maintenance.py"), table.uri, "--result-file", str(result),
                         submit=os.path.join(env["SPARK_HOME"], "bin", "spark-submit")),
            capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        state = wait_for("application completed", lambda s: s.get("completedapps"), webui, [], timeout=60)
    apps = state["completedapps"]
    assert len(apps) == 1 and apps[0]["name"] == "memwal-maintenance", apps
    # The executor ran in the worker's JVM: its work dir holds the app's executor logs.
    app_dirs = list(work_dir.glob("app-*"))
    assert [d.name for d in app_dirs] == [apps[0]["id"]]
    logs = "".join(f.read_text(errors="replace") for f in app_dirs[0].glob("*/stderr"))
    assert "Finished task" in logs, logs[-2000:]
    doc = {j["job"]: j["result"] for j in json.loads(result.read_text())["jobs"]}  # memwal cycle's document
    assert doc["merge"]["engine"] == "spark" and doc["merge"]["shards"] and doc["merge"]["commit_path"] == "driverless"
    assert table.manifest().compacted and set(table.manifest().compacted.values()) == {4}
    assert table_rows(table) == model.sorted_rows()
