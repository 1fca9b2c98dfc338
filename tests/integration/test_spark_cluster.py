"""A real Spark standalone cluster: one master and one worker on 127.0.0.1, from the installed pyspark.

``spark-submit --master spark://127.0.0.1:PORT jobs/maintenance.py TABLE`` must run its tasks
in the worker's executor (a separate JVM and Python workers, not the driver), and leave the
table equal to the model. The cluster is started with ``spark-class`` (pyspark ships no
``sbin/start-master.sh``), on ports chosen free, and stopped in a ``finally``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import table_rows
from tests.helpers import ROOT


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_env() -> dict:
    env = dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    if "JAVA_HOME" not in env:
        java = subprocess.run(["bash", "-c", "readlink -f \"$(command -v java)\""], capture_output=True, text=True)
        if java.returncode == 0 and java.stdout.strip():
            env["JAVA_HOME"] = str(Path(java.stdout.strip()).parent.parent)
    return env


def master_state(webui: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{webui}/json", timeout=5) as resp:
        return json.loads(resp.read())


def wait_for(what: str, check, webui: int, procs: list[subprocess.Popen], timeout: float = 120) -> dict:
    """Poll the master's JSON until ``check`` holds; fail early when a daemon died."""
    deadline = time.monotonic() + timeout
    last: dict = {}
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"{what}: a cluster daemon exited with {p.returncode}")
        try:
            last = master_state(webui)
            if check(last):
                return last
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{what}: not reached within {timeout}s; master state {last}")


@contextmanager
def standalone_cluster(tmp: Path) -> Iterator[tuple[str, int, Path]]:
    """Master and worker as child processes (stopped by their ids on the way out); yields
    (master URL, master web UI port, worker dir)."""
    env = cluster_env()
    spark_class = os.path.join(env["SPARK_HOME"], "bin", "spark-class")
    port, webui, worker_ui = free_port(), free_port(), free_port()
    work_dir = tmp / "worker-work"
    work_dir.mkdir()
    procs: list[subprocess.Popen] = []
    try:
        master = subprocess.Popen(
            ["bash", spark_class, "org.apache.spark.deploy.master.Master",
             "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui)],
            env=env, stdout=open(tmp / "master.log", "w"), stderr=subprocess.STDOUT)
        procs.append(master)
        wait_for("master up", lambda s: s.get("status") == "ALIVE", webui, procs)
        url = f"spark://127.0.0.1:{port}"
        procs.append(subprocess.Popen(
            ["bash", spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
             "--webui-port", str(worker_ui), "--cores", "2", "--memory", "2g", "--work-dir", str(work_dir)],
            env=env, stdout=open(tmp / "worker.log", "w"), stderr=subprocess.STDOUT))
        wait_for("worker registered", lambda s: any(w["state"] == "ALIVE" for w in s.get("workers", [])), webui,
                 procs)
        yield url, webui, work_dir
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.mark.skipif(not os.path.exists(os.path.join(spark_home(), "bin", "spark-class")), reason="no spark-class")
def test_maintenance_job_on_a_standalone_cluster(make_table, tmp_path):
    table, model = make_table()
    with standalone_cluster(tmp_path) as (url, webui, work_dir):
        env = cluster_env()
        result = tmp_path / "result.json"
        proc = subprocess.run(
            [os.path.join(env["SPARK_HOME"], "bin", "spark-submit"), "--master", url,
             "--conf", "spark.ui.enabled=false", "--conf", f"spark.pyspark.python={sys.executable}",
             "--conf", "spark.executor.memory=1g", "--conf", "spark.cores.max=2",
             str(ROOT / "jobs/maintenance.py"), table.uri, "--result-file", str(result)],
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
    assert doc["merge"]["engine"] == "spark" and doc["merge"]["shards"]
    assert table.manifest().compacted and set(table.manifest().compacted.values()) == {4}
    assert table_rows(table) == model.sorted_rows()
