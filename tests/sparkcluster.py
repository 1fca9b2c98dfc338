"""A Spark standalone cluster on 127.0.0.1 from the installed pyspark: one master, N workers.

pyspark ships no ``sbin/start-master.sh``, so the daemons are started with ``spark-class`` on
ports chosen free, as child processes of the caller, and stopped by their ids in a
``finally``. Used by ``tests/integration/test_spark_cluster.py`` and ``bench/spark/driver_share.py``.
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
def standalone_cluster(tmp: Path, *, workers: int = 1, cores: int = 2, memory: str = "2g",
                       pids: list[int] | None = None) -> Iterator[tuple[str, int, Path]]:
    """Master and ``workers`` workers (``cores`` and ``memory`` each) as child processes,
    stopped by their ids on the way out; yields (master URL, master web UI port, the first
    worker's dir). ``pids`` receives the workers' process ids (their executors run under them)."""
    env = cluster_env()
    spark_class = os.path.join(env["SPARK_HOME"], "bin", "spark-class")
    port, webui = free_port(), free_port()
    work_dir = tmp / "worker-work"
    procs: list[subprocess.Popen] = []
    try:
        master = subprocess.Popen(
            ["bash", spark_class, "org.apache.spark.deploy.master.Master",
             "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui)],
            env=env, stdout=open(tmp / "master.log", "w"), stderr=subprocess.STDOUT)
        procs.append(master)
        wait_for("master up", lambda s: s.get("status") == "ALIVE", webui, procs)
        url = f"spark://127.0.0.1:{port}"
        for i in range(workers):
            wdir = work_dir if i == 0 else tmp / f"worker-work-{i}"
            wdir.mkdir()
            worker = subprocess.Popen(
                ["bash", spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                 "--webui-port", str(free_port()), "--cores", str(cores), "--memory", memory, "--work-dir", str(wdir)],
                env=env, stdout=open(tmp / f"worker-{i}.log", "w"), stderr=subprocess.STDOUT)
            procs.append(worker)
            if pids is not None:
                pids.append(worker.pid)
        wait_for("workers registered", lambda s: sum(w["state"] == "ALIVE" for w in s.get("workers", [])) == workers,
                 webui, procs)
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
