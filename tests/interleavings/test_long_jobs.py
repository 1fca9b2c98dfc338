"""Long jobs: one step longer than the lease TTL no longer throws the job's work away.

Each test holds a job at a named step (the step hook harness) while the test moves the
process's clock by three TTLs; the job's heartbeat renews its lease meanwhile, a second job
of the same kind started then is refused (exit 3), and the held job, once resumed, commits
and ends with exit 0. Before the heartbeat existed, each of these jobs lost its lease to the
clock and exited 3. Local engine through the CLI, the Spark engine with a held stage, and
an Airflow task.
"""

from __future__ import annotations

import json

import pytest

import memwal
from memwal.errors import LeaseHeldError
from memwal.lease import list_leases
from tests.conftest import lsm_rows, table_rows
from tests.helpers import run_cli
from tests.interleave import Barrier, ManualClock, Stalled

TTL = 30.0


def outlive_ttls(clock: ManualClock, table_uri: str, kind: str, second_job) -> None:
    """Three TTLs pass in renewal-sized steps; after each, the lease is live and the second
    job of the same kind is refused."""
    for _ in range(9):
        clock.advance(TTL / 3)
        [info] = [i for i in list_leases(memwal.open(table_uri).table.store, now=clock.now) if i.kind == kind]
        assert (info.state, info.renewed_at, info.expires_at) == ("live", clock.now, clock.now + TTL)
        with pytest.raises(LeaseHeldError) as refused:
            second_job()
        assert refused.value.exit_code == 3


def prepare(table, job: str) -> dict:
    """Give ``job`` work to do; the keyword options it runs with."""
    t = memwal.open(table.uri)
    if job in ("catchup", "compact", "gc", "snapshot"):
        assert t.merge(max_generations=2).ok
        assert t.merge().ok
    if job == "gc":
        assert t.catchup().ok
        return {"grace_seconds": 0, "writer_idle_seconds": 0, "expire_versions": 0}
    if job == "compact":
        return {"target_rows_per_fragment": 100_000}
    return {}


STEPS = {
    "merge": "merge.after-read",
    "catchup": "catchup.before-build",
    "compact": "compact.after-tasks",
    "snapshot": "snapshot.before-commit",
    "gc": "gc.before-delete",
}


@pytest.mark.parametrize("job", list(STEPS))
def test_a_job_whose_one_step_lasts_three_ttls_finishes(make_table, manual_clock, job):
    table, model = make_table()
    options = prepare(table, job)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
    held = Stalled(lambda: run_cli(job, table.uri, "--lease-ttl", str(TTL), "--json", *flags), STEPS[job])
    kind = "merge" if job == "snapshot" else job  # the refresh also holds the merge lease
    waits = {"lease_wait": 0} if job in ("merge", "snapshot") else {}  # the others never wait
    outlive_ttls(manual_clock, table.uri, kind,
                 lambda: getattr(memwal.open(table.uri), job)(lease_ttl=TTL, **waits))
    held.resume()
    assert held.error is None, held.error
    run = held.outcome
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    if job in ("merge", "catchup", "compact", "snapshot"):
        assert doc["version"] is not None, doc  # it committed its work
    if job == "gc":
        assert doc["deleted"], doc
    assert lsm_rows(table) == model.sorted_rows()
    assert {i.kind: i.state for i in list_leases(table.store, now=manual_clock.now)}[kind] == "released"


def test_spark_engine_long_stage_keeps_its_lease(make_table, manual_clock, spark_session, tmp_path):
    """The merge's read stage is held on the executors (a barrier the tasks reach) for three
    TTLs; the driver's heartbeat renews the lease, and the merge commits."""
    table, model = make_table()
    with Barrier(str(tmp_path / "barrier"), "spark.merge.read-task") as barrier:
        job = Stalled(lambda: memwal.open(table.uri).merge(engine="spark", lease_ttl=TTL), "merge.before-read")
        job.go.set()  # the driver runs on; the executors stop at the barrier
        barrier.wait_reached()
        outlive_ttls(manual_clock, table.uri, "merge",
                     lambda: memwal.open(table.uri).merge(lease_ttl=TTL, lease_wait=0))
        barrier.release()
        job.resume()
    assert job.error is None, job.error
    result = job.outcome
    assert result.ok and result.to_dict()["engine"] == "spark" and result.to_dict()["version"] is not None
    assert table_rows(table) == model.sorted_rows()


def test_airflow_task_outlives_its_lease_ttl(make_table, manual_clock):
    from memwal.airflow.operators import MemWalMergeOperator

    from tests.integration.test_airflow import context

    table, model = make_table()
    op = MemWalMergeOperator(task_id="merge", table=table.uri, lease_ttl=TTL)
    ctx = context()
    held = Stalled(lambda: op.execute(ctx), "merge.after-read")
    outlive_ttls(manual_clock, table.uri, "merge",
                 lambda: memwal.open(table.uri).merge(lease_ttl=TTL, lease_wait=0))
    held.resume()
    assert held.error is None, held.error
    assert held.outcome["version"] is not None
    assert table_rows(table) == model.sorted_rows()
