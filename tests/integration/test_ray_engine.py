"""The Ray engine on a real Ray: a local Ray of 2 CPUs in this process (``ray_local``) and a
``ray start --head`` cluster with a second node on loopback. The same plans, the same tables
as the local engine; a cancel stops the tasks; a worker killed mid-merge is retried by Ray and
the table comes out right; a client without Ray, or a cluster that cannot be reached, gets one
line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from memwal.ray.merge import RayMergeEngine

import memwal
from memwal.demo import Workload
from memwal.history.log import read_runs
from memwal.merge import run_merge
from memwal.table import open_table
from tests.clients.jobs import ZERO
from tests.conftest import lsm_rows, table_rows
from tests.helpers import CliRun, assert_one_line_error, assert_only_run_records, memwal_program, run_cli, tree_digest
from tests.integration.test_clients_pylance import Writes, reads_every_row
from tests.integration.test_driverless_merge import unreferenced
from tests.interleave import Barrier, ManualClock
from tests.interleavings.test_cancel_jobs import assert_cancel_stops_engine_tasks

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)

#: The two shapes of a merge job, as in tests/integration/test_spark_merge.py: the keyed
#: shuffle with tiny read tasks (one generation each, so a reduce task joins several read
#: tasks' objects), and by shard, as users run it.
# internal entry: the read task size and the partitions are no user options
SHAPES = {"shuffle": dict(partitions=3, read_task_bytes=1), "by-shard": {}}


@pytest.mark.parametrize("path", ["driverless", "driver"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_ray_engine_gives_the_same_table_as_the_local_engine(make_table, ray_local, tmp_path, shape, path):
    table, model = make_table(Workload(base_rows=400, shards=3, generations=5, rows_per_generation=50, seed=11))
    copy = tmp_path / "copy"
    shutil.copytree(table.uri, copy)
    local = memwal.open(table.uri).merge().value
    other = open_table(str(copy))
    # internal entry: the commit path is the core's choice, no user option
    engine = RayMergeEngine(**SHAPES[shape], driverless=path == "driverless")
    distributed = run_merge(other, engine=engine)
    assert distributed.engine == "ray" and engine.last_timings["shape"] == shape
    assert engine.last_timings["partitions"] == (3 if shape == "shuffle" else 2)
    assert (distributed.commit_path, local.commit_path) == (path, "driver")
    assert table_rows(other) == table_rows(table) == model.sorted_rows()
    assert other.manifest().compacted == table.manifest().compacted
    key = lambda r: r.shard_id  # noqa: E731
    assert sorted(local.shards, key=key) == sorted(distributed.shards, key=key)
    assert not any((copy / "_mem_wal" / "_staging").rglob("*")) and unreferenced(other) == set()


def test_every_job_on_ray_follows_a_live_writer(live, ray_local) -> None:
    """Each job on Ray after a flush of a pylance writer kept open, then the cycle: the writer
    and a reader of the shard manifests read every row after each; each job says it ran on Ray."""
    writes = Writes()
    t = memwal.open(live.uri)
    jobs = {"merge": lambda: t.merge(engine="ray"), "catchup": lambda: t.catchup(engine="ray"),
            "compact": lambda: t.compact(engine="ray", target_rows_per_fragment=100_000),
            "snapshot": lambda: t.snapshot(engine="ray"), "gc": lambda: t.gc(**ZERO, engine="ray")}
    for name, job in jobs.items():
        live.generation(writes.keys(live))
        result = job()
        assert result.ok and result.value.engine == "ray", name
        reads_every_row(live)
    live.generation(writes.keys(live))
    run = run_cli("cycle", live.uri, "--engine", "ray", "--json", "--grace-seconds", "0")
    assert run.rc == 0, run.stderr
    assert {j["job"]: j["result"]["engine"] for j in json.loads(run.stdout)["jobs"]} == dict.fromkeys(jobs, "ray")
    reads_every_row(live)
    live.close()
    assert lsm_rows(t.table) == table_rows(t.table) == live.model.sorted_rows()
    assert run_cli("verify", live.uri).rc == 0


RAY_STAGES = {"merge": "ray.merge.read-task", "compact": "ray.compact.task", "catchup": "ray.catchup.task"}


@pytest.mark.parametrize("job", list(RAY_STAGES))
def test_a_cancel_stops_the_ray_tasks(make_table, ray_local, manual_clock: ManualClock, tmp_path, job):
    """Held inside a Ray task: the cancel kills the tasks' workers; one line naming the Ray job."""
    error = assert_cancel_stops_engine_tasks(make_table, manual_clock, tmp_path, job, "ray", RAY_STAGES[job])
    assert "the Ray job memwal-" in error and "was cancelled" in error, error


def test_a_merge_cancelled_after_its_tasks_wrote_leaves_none_of_their_files(make_table, ray_local,
                                                                             manual_clock: ManualClock, tmp_path):
    """Held at the retire stage, the upserts already written into the table by the reduce tasks:
    the cancel stops the job and every file its tasks wrote is removed (their receipts list them)."""
    error = assert_cancel_stops_engine_tasks(make_table, manual_clock, tmp_path, "merge", "ray",
                                             "ray.merge.retire-task")
    assert "the Ray job memwal-" in error and "was cancelled" in error, error


@pytest.mark.parametrize("step", ["ray.merge.read-task", "ray.merge.retire-task"])
def test_a_worker_killed_mid_merge_is_retried_and_the_table_comes_out_right(make_table, ray_local, tmp_path, step):
    """The worker process running a merge task is killed (SIGKILL) while its task is held:
    before it read (a reduce task), or after the upserts were written (a retire task). Ray runs
    the task again on another worker; the merge commits once, every row right, no file left
    that no version names."""
    table, model = make_table(Workload(base_rows=400, shards=3, generations=4, rows_per_generation=40, seed=5))
    outcome: dict[str, object] = {}
    with Barrier(str(tmp_path / "barrier"), step) as barrier:
        thread = threading.Thread(target=lambda: outcome.update(result=memwal.open(table.uri).merge(engine="ray")))
        thread.start()
        barrier.wait_reached()
        (pid, *_) = [int(p) for p in Path(barrier.reached_path).read_text().split()]
        os.kill(pid, signal.SIGKILL)
        barrier.release()
        thread.join(180)
    assert not thread.is_alive()
    result = outcome["result"]
    assert result.ok and result.value.engine == "ray" and result.value.commit_path == "driverless", result
    table = open_table(table.uri)
    assert table_rows(table) == lsm_rows(table) == model.sorted_rows()
    assert unreferenced(table) == set() and not any(Path(table.uri, "_mem_wal", "_staging").rglob("*"))


def test_a_client_without_ray_gets_one_line_naming_the_extra_and_nothing_is_written(make_table):
    table, _ = make_table()
    before = tree_digest(table.uri)
    hide = "import sys; sys.modules['ray'] = None; from memwal.cli.main import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", hide, "merge", table.uri, "--engine", "ray"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "memwal-jobs[ray]" in line and "ray" in line, line
    assert tree_digest(table.uri) == before


def test_ray_address_flags_are_checked_before_anything_is_written(make_table):
    table, _ = make_table()
    before = tree_digest(table.uri)
    for argv, needle in ((["--engine", "local", "--ray-address", "127.0.0.1:1"], "--engine local"),
                         (["--ray-address", "127.0.0.1:1", "--spark-remote", "sc://127.0.0.1:1"], "give one"),
                         (["--ray-address", " "], "--ray-address")):
        assert_one_line_error(run_cli("merge", table.uri, *argv), 2, needle)
    run = run_cli_env({"MEMWAL_RAY_CONNECT_SECONDS": "soon"}, "merge", table.uri, "--engine", "ray")
    assert_one_line_error(run, 2, "MEMWAL_RAY_CONNECT_SECONDS")
    assert tree_digest(table.uri) == before


def test_a_cluster_that_cannot_be_reached_fails_in_the_bound_with_one_line(make_table):
    table, model = make_table()
    before = tree_digest(table.uri)
    started = time.monotonic()
    run = run_cli_env({"MEMWAL_RAY_CONNECT_SECONDS": "3"}, "merge", table.uri, "--ray-address", "127.0.0.1:9")
    assert_one_line_error(run, 1, "Ray cluster at 127.0.0.1:9")
    assert time.monotonic() - started < 60
    assert_only_run_records(before, tree_digest(table.uri), "merge")
    assert lsm_rows(table) == model.sorted_rows()


def run_cli_env(env: dict[str, str], *argv: str) -> CliRun:
    """``memwal ARGV`` in a process of its own with ``env`` added (Ray settings live in the environment)."""
    proc = subprocess.run([memwal_program(), *argv], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})
    return CliRun(proc.returncode, proc.stdout, proc.stderr)


def test_the_cycle_on_a_ray_cluster_of_two_nodes(make_table, ray_cluster, tmp_path):
    """``memwal cycle --ray-address`` against a head and a second node: every job on Ray, the
    table every row right; the cluster's token travels in the environment only."""
    address, env = ray_cluster.address, ray_cluster.env
    table, model = make_table(Workload(base_rows=400, shards=4, generations=4, rows_per_generation=40, seed=2))
    run = run_cli_env(env, "cycle", table.uri, "--ray-address", address, "--json", "--grace-seconds", "0",
                      "--writer-idle-seconds", "0", "--expire-versions", "0")
    assert run.rc == 0, run.stderr
    jobs = json.loads(run.stdout)["jobs"]
    assert [j["job"] for j in jobs] == ["merge", "catchup", "compact", "gc", "snapshot"]
    statuses = [(j["status"], j["result"]["engine"]) for j in jobs]
    assert statuses == [("done", "ray")] * 5, statuses
    assert len(jobs[3]["result"]["deleted"]) == 16, jobs[3]["result"]  # GC freed every merged generation
    assert env["RAY_AUTH_TOKEN"] not in run.stdout + run.stderr
    table = open_table(table.uri)
    assert table_rows(table) == lsm_rows(table) == model.sorted_rows()
    assert run_cli("verify", table.uri).rc == 0


def test_a_cluster_lost_mid_merge_fails_in_the_bound_with_one_line(make_table, ray_cluster, ray_local, tmp_path):
    """The head of the cluster is killed while the merge's tasks run (held at a barrier): the
    driver stops waiting once the cluster gave no answer for the bound and fails with one line,
    exit 1, nothing committed; the next merge, on a local Ray, merges every row."""
    table, model = make_table()
    version, rows = table.dataset().version, lsm_rows(table)
    env = {**ray_cluster.env, "MEMWAL_RAY_LOST_SECONDS": "5"}
    with Barrier(str(tmp_path / "barrier"), "ray.merge.read-task") as barrier:
        proc = subprocess.Popen([memwal_program(), "merge", table.uri, "--ray-address", ray_cluster.address],
                                env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        barrier.wait_reached()
        started = time.monotonic()
        ray_cluster.kill_head()
        out, err = proc.communicate(timeout=120)
        barrier.release()
    assert time.monotonic() - started < 60, "the lost cluster was waited for past its bound"
    run = CliRun(proc.returncode, out, err)
    assert_one_line_error(run, 1, f"Ray cluster at {ray_cluster.address}: lost: no answer for 5 s")
    table = open_table(table.uri)
    assert table.dataset().version == version and lsm_rows(table) == rows
    assert memwal.open(table.uri).merge(engine="ray").ok  # the next run: a local Ray
    assert table_rows(open_table(table.uri)) == model.sorted_rows()


def test_the_fleet_runs_small_tables_as_ray_tasks(make_table, ray_local, tmp_path):
    """``fleet run --engine ray``: each table's cycle is a Ray task (its jobs run, with the local
    engine inside, in a Ray worker: another process than this one), every row right."""
    root = tmp_path / "lake"
    built = {str(root / name): make_table(uri=str(root / name)) for name in ("a/t1", "t2")}
    run = run_cli("fleet", "run", str(root), "--engine", "ray", "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["engine"] == "ray" and doc["failed_tables"] == []
    for uri, (table, model) in built.items():
        assert table_rows(open_table(uri)) == model.sorted_rows()
        runs = list(read_runs(table.store))
        assert {r.job for r in runs} >= {"merge", "catchup", "compact", "snapshot"}, runs
        assert {r.engine for r in runs} == {"local"}  # the local engine inside each task
        assert all(r.holder and int(r.holder.split(":")[1]) != os.getpid() for r in runs)  # in a Ray worker
