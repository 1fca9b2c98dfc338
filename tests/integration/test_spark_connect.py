"""The Spark engine over Spark Connect: a real server on loopback (PySpark's own jars, one for the
session: ``connect_server``), clients with no Java at all.

Every client here is a ``memwal`` process whose PATH holds no ``java`` and whose environment has
no ``JAVA_HOME`` (:func:`tests.sparkconnect.javaless_env`): a JVM started on the client would fail
the job, so a job that succeeds started none. The server's executors run the engines' tasks in
their own Python workers, with memwal installed, as a cluster's would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import lance
import pytest

import memwal
from memwal.demo import Workload
from memwal.history.log import read_runs
from memwal.table import Table, open_table
from tests.conftest import table_rows
from tests.integration.test_driverless_merge import unreferenced
from tests.interleave import Barrier
from tests.sparkconnect import ConnectServer, javaless_env

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)

#: How long a client process may take (its first Spark job waits for the server's Python workers).
CLIENT_TIMEOUT = 600


def memwal_cli(*argv: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "memwal.cli", *argv], env=env, cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finished(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=CLIENT_TIMEOUT)
    return proc.returncode, out, err


def wait_held(barrier: Barrier, proc: subprocess.Popen[str]) -> None:
    """Wait until a task reached the barrier (failing with the client's output if it ended first)."""
    deadline = time.monotonic() + CLIENT_TIMEOUT
    while not os.path.exists(barrier.reached_path):
        if proc.poll() is not None:
            raise AssertionError(f"the client ended ({proc.returncode}) before step {barrier.step}: "
                                 f"{proc.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, f"no task reached step {barrier.step}"
        time.sleep(0.05)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("memwal: error:")]


def assert_no_staging_files(table: Table) -> None:
    """Nothing of a merge job is left in its staging folder but, at most, the closed mark of a
    job whose tasks the client could not see end (an orphan for ``gc --orphans``)."""
    staging = Path(table.uri) / "_mem_wal" / "_staging"
    left = [p for p in staging.rglob("*") if p.is_file()] if staging.exists() else []
    assert all(p.name == "closed" for p in left), left


def test_a_cycle_over_spark_connect_leaves_the_table_the_writers_wrote(make_table, connect_server: ConnectServer,
                                                                       tmp_path: Path) -> None:
    """``memwal cycle --engine spark`` with ``SPARK_REMOTE`` set (the table given as a relative
    path): every job on the server, the base table equal to the model of what pylance's
    ShardWriter wrote, progress recorded."""
    table, model = make_table(Workload(base_rows=400, shards=3, generations=5, rows_per_generation=50, seed=11))
    env = javaless_env(connect_server.url)
    relative = os.path.relpath(table.uri, tmp_path)  # the server's executors have a working directory of their own
    code, out, err = finished(memwal_cli("cycle", relative, "--engine", "spark", "--json", "--grace-seconds", "0",
                                         "--writer-idle-seconds", "0", env=env, cwd=tmp_path))
    assert code == 0, err[-3000:]
    doc = json.loads(out)
    statuses = {j["job"]: j["status"] for j in doc["jobs"]}
    assert statuses == {"merge": "done", "catchup": "done", "compact": "done", "gc": statuses["gc"],
                        "snapshot": "done"}, doc
    assert statuses["gc"] in ("done", "waiting")
    assert {j["result"]["engine"] for j in doc["jobs"] if j["result"] and "engine" in j["result"]} == {"spark"}
    table = open_table(table.uri)
    assert table_rows(table) == model.sorted_rows()
    assert set(table.manifest().compacted.values()) == {5}
    assert {r.engine for r in read_runs(table.store, job="merge")} == {"spark"}
    assert_no_staging_files(table)
    assert not unreferenced(table)  # every version read: what compaction replaced is still named


def test_merge_operators_fold_over_spark_connect_like_the_local_engine(connect_server: ConnectServer,
                                                                       tmp_path: Path) -> None:
    """A folding table merged over Connect (the ``--spark-remote`` flag this time) equals its
    copy merged by the local engine, row for row, and the model."""
    from tests.integration.test_merge_ops import approx, base_rows, build_folding_table

    uri = str(tmp_path / "t")
    model = build_folding_table(uri)
    copy = tmp_path / "copy"
    shutil.copytree(uri, copy)
    assert memwal.open(uri).merge().ok
    code, out, err = finished(memwal_cli("merge", str(copy), "--spark-remote", connect_server.url, "--json",
                                         env=javaless_env(), cwd=tmp_path))
    assert code == 0, err[-3000:]
    doc = json.loads(out)
    assert doc["engine"] == "spark" and doc["commit_path"] == "driver"
    assert base_rows(str(copy)) == base_rows(uri)
    assert approx(base_rows(uri)) == approx(model.rows())
    assert open_table(str(copy)).manifest().compacted == open_table(uri).manifest().compacted
    assert lance.dataset(str(copy)).count_rows() == len(model.rows())


def test_a_cancel_interrupts_the_spark_connect_job(make_table, connect_server: ConnectServer, tmp_path: Path) -> None:
    """The merge held in its tasks on the server; ``memwal fleet cancel`` asks it to stop: the
    client's lease watcher interrupts the job's tag, the run ends with exit 3 and one clean line,
    the history says cancelled, and nothing was committed."""
    from tests.interleavings.test_cancel_jobs import BY, WHY, assert_cancelled_run, cancel

    table, model = make_table()
    version, rows = table.dataset().version, table_rows(table)
    with Barrier(str(tmp_path / "barrier"), "spark.merge.read-task") as barrier:
        proc = memwal_cli("merge", table.uri, "--engine", "spark", env=javaless_env(connect_server.url),
                          cwd=tmp_path)
        wait_held(barrier, proc)
        assert cancel(table.uri)["cancelled"] == ["merge"]
        code, _, err = finished(proc)  # the watcher reads the lease within WATCH_SECONDS
        barrier.release()
    assert code == 3, err[-3000:]
    (line,) = error_lines(err)
    assert f"cancelled by {BY}: {WHY}" in line and "was interrupted" in line, line
    for raw in ("Py4J", "py4j", "collectAndServe", "grpc", "Traceback", "JVM"):
        assert raw not in err, err
    table = open_table(table.uri)
    assert table.dataset().version == version and table_rows(table) == rows
    assert_cancelled_run(table, "merge", ["merge"])
    assert_no_staging_files(table)
    assert memwal.open(table.uri).merge().ok and table_rows(open_table(table.uri)) == model.sorted_rows()


def test_a_server_killed_mid_merge_fails_the_job_in_one_line_and_a_rerun_converges(
        make_table, connect_server: ConnectServer, tmp_path: Path) -> None:
    """Killed while the merge's retire tasks are held (its upserts already written into the
    table by the reduce tasks): the client fails with one line naming the lost server, commits
    nothing and removes what the tasks wrote (their receipts name it); once the server is back,
    a rerun merges everything, equal to the model, with no file left behind."""
    table, model = make_table(Workload(base_rows=400, shards=3, generations=5, rows_per_generation=50, seed=3))
    version = table.dataset().version
    with Barrier(str(tmp_path / "barrier"), "spark.merge.retire-task") as barrier:
        proc = memwal_cli("merge", table.uri, "--engine", "spark", env=javaless_env(connect_server.url), cwd=tmp_path)
        wait_held(barrier, proc)
        assert unreferenced(open_table(table.uri))  # the reduce tasks wrote the upserts
        connect_server.kill()
        try:
            code, _, err = finished(proc)
        finally:
            barrier.release()
            connect_server.start()
    assert code == 1, err[-3000:]
    (line,) = error_lines(err)
    assert f"Spark Connect at {connect_server.url}: connection lost" in line, line
    assert "Traceback" not in err
    table = open_table(table.uri)
    assert table.dataset().version == version and table.manifest().compacted == {}
    deadline = time.monotonic() + 30  # a held task of the killed server may still remove what it wrote
    while unreferenced(table) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not unreferenced(table)
    code, out, err = finished(memwal_cli("merge", table.uri, "--engine", "spark", "--json",
                                         env=javaless_env(connect_server.url), cwd=tmp_path))
    assert code == 0, err[-3000:]
    table = open_table(table.uri)
    assert table_rows(table) == model.sorted_rows()
    assert set(table.manifest().compacted.values()) == {5}
    assert not unreferenced(table)
    assert os.environ.get("SPARK_REMOTE") is None  # the test process itself stayed classic


def test_an_airflow_spark_connect_connection_runs_the_operator_s_job_over_connect(
        make_table, connect_server: ConnectServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Spark provider's own ``spark_connect`` connection type (host, port) selects Spark
    Connect: the operator runs its job file as a client of that server, no spark-submit and no
    Java on the worker, and pushes the job's document."""
    from memwal.airflow.operators import MemWalMergeOperator

    from tests.integration.test_airflow import alias_events, context

    table, model = make_table()
    monkeypatch.setenv("AIRFLOW_CONN_MEMWAL_CONNECT", json.dumps(
        {"conn_type": "spark_connect", "host": "127.0.0.1", "port": connect_server.port}))
    for key, value in javaless_env().items():
        if key in ("PATH", "MEMWAL_SPARK_CONNECT_RETRY_SECONDS"):
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    ctx = context()
    doc = MemWalMergeOperator(task_id="merge", table=table.uri, engine="spark", spark_conn_id="memwal_connect",
                              max_generations=3).execute(ctx)
    assert doc["engine"] == "spark" and doc["version"] == table.manifest().version
    assert {(s["from_generation"], s["to_generation"]) for s in doc["shards"]} == {(1, 3)}
    assert len(alias_events(ctx)) == 1
    assert memwal.open(table.uri).merge().ok
    assert table_rows(open_table(table.uri)) == model.sorted_rows()


@pytest.mark.parametrize("argv, needle", [
    (["--spark-remote", "http://127.0.0.1:15002"], "expected a Spark Connect URL"),
    (["--spark-remote", "sc://127.0.0.1:15002", "--engine", "local"], "cannot go with --engine local"),
    (["--spark-remote", "sc://127.0.0.1:15002/;token=s3cr3t-Token"], "set SPARK_REMOTE in the environment"),
])
def test_a_bad_spark_remote_is_bad_input_and_writes_nothing(make_table, argv: list[str], needle: str) -> None:
    from tests.helpers import assert_one_line_error, run_cli, tree_digest

    table, _ = make_table()
    before = tree_digest(table.uri)
    run = run_cli("merge", table.uri, *argv)
    assert_one_line_error(run, 2, "--spark-remote", needle)
    assert "s3cr3t" not in run.stderr + run.stdout  # a token is never shown
    assert tree_digest(table.uri) == before and "SPARK_REMOTE" not in os.environ


def test_a_fleet_runs_its_small_tables_as_tasks_on_the_connect_server(tmp_path: Path,
                                                                      connect_server: ConnectServer) -> None:
    """``memwal fleet run --engine spark`` over Connect: the small tables' cycles are tasks on the
    server's executors (the local engine inside), every table left as its writers wrote it."""
    from tests.integration.test_fleet import make

    root = tmp_path / "lake"
    models = {str(root / "a" / "t1"): make(root / "a" / "t1"), str(root / "t2"): make(root / "t2")}
    code, out, err = finished(memwal_cli("fleet", "run", str(root), "--spark-remote", connect_server.url, "--json",
                                         env=javaless_env(), cwd=tmp_path))
    assert code == 0, err[-3000:]
    doc = json.loads(out)
    assert doc["engine"] == "spark" and doc["failed_tables"] == []
    for uri, model in models.items():
        assert table_rows(open_table(uri)) == model.sorted_rows()


#: An application with its own Spark Connect session (a notebook's), no SPARK_REMOTE: the API's
#: Spark engine uses that session.
APPLICATION = """
import sys
from pyspark.sql import SparkSession
import memwal
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
result = memwal.open(sys.argv[2]).merge(engine="spark")
assert result.ok and result.value.engine == "spark", result
from memwal.spark.engine.session import active_or_local
assert active_or_local() is spark
print(result.value.version)
"""


def test_the_python_api_uses_the_application_s_own_connect_session(make_table, connect_server: ConnectServer,
                                                                   tmp_path: Path) -> None:
    table, model = make_table()
    proc = subprocess.run([sys.executable, "-c", APPLICATION, connect_server.url, table.uri], env=javaless_env(),
                          cwd=tmp_path, capture_output=True, text=True, timeout=CLIENT_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.split()[-1]) == open_table(table.uri).manifest().version
    assert table_rows(open_table(table.uri)) == model.sorted_rows()
