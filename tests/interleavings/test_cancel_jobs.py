"""An operator's cancel stops every job kind at its next safe point (docs/decisions/0049).

Each job is held at a named step (the step hook harness) after it took its leases and before
its next safe point; ``memwal fleet cancel`` asks it to stop, then it goes on. It stops at that
point with exit code 3 and one line "cancelled by WHO: WHY", having written nothing to the
table but its run record and its released leases; its history record says ``cancelled``, who
and why; ``fleet cancel`` said it was still running, and ``fleet cancel --wait`` waits until
it stopped and says so. On the Spark engines the job is held inside a Spark stage (a barrier
its tasks reach): the cancel reaches the driver through the lease watcher, which cancels the
job group; nothing is committed and the merge's staged files are removed. A fleet run skips
a cancelled table for the rest of the run.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

import memwal
from memwal.history.log import read_runs
from memwal.lease import LeaseRecord, lease_key
from memwal.lease.cancel import WATCH_SECONDS
from tests.conftest import lsm_rows, table_rows
from tests.helpers import assert_only_run_records, run_cli, tree_digest
from tests.interleave import SETTLE_TIMEOUT, Barrier, ManualClock, Stalled

BY, WHY = "alice", "a bad hour for it"

#: Where each job is held: it holds its leases, and its next lease check is a safe point.
HELD_AT = {
    "merge": "merge.after-read",  # read its batch; the check before the first commit
    "catchup": "catchup.before-build",  # the check right before the index commit
    "compact": "compact.after-tasks",  # the rewrites done; the check before their commit
    "gc": "gc.before-drain",  # marker written; the check before the drains and deletes
    "snapshot": "snapshot.leased",  # its leases held; the check before anything is written
}


def prepare(table, job: str) -> list[str]:
    """Give ``job`` work; the flags it runs with."""
    t = memwal.open(table.uri)
    if job in ("catchup", "compact", "gc", "snapshot"):
        assert t.merge(max_generations=2).ok and t.merge().ok
    if job == "gc":
        assert t.catchup().ok
        return ["--grace-seconds", "0", "--writer-idle-seconds", "0", "--expire-versions", "never"]
    if job == "compact":
        return ["--target-rows-per-fragment", "100000"]
    return []


def cancel(uri: str, *extra: str) -> dict:
    run = run_cli("fleet", "cancel", uri, "--by", BY, "--reason", WHY, "--json", *extra)
    assert run.rc == 0, run.stderr
    return json.loads(run.stdout)


def assert_cancelled_run(table, job: str, kinds: list[str]) -> None:
    """The job's newest run record says cancelled, by whom and why, with nothing committed;
    its leases are released with no request left in them."""
    record = next(read_runs(table.store, job=job))
    assert record.outcome == "cancelled" and f"cancelled by {BY}: {WHY}" in record.error and record.versions == []
    for kind in kinds:
        released = LeaseRecord.from_json(table.store.get(lease_key(kind)))
        assert released.expires_at == 0 and released.cancel is None
    history = run_cli("history", table.uri, "--json", "--limit", "1")
    assert json.loads(history.stdout)["runs"][0]["outcome"] == "cancelled"


@pytest.mark.parametrize("job", list(HELD_AT))
def test_a_cancel_stops_each_job_at_its_next_safe_point(make_table, job):
    table, model = make_table()
    flags = prepare(table, job)
    version, rows, before = table.dataset().version, lsm_rows(table), tree_digest(table.uri)
    kinds = ["merge", "snapshot"] if job == "snapshot" else [job]  # the refresh holds the merge lease too

    held = Stalled(lambda: run_cli(job, table.uri, "--json", *flags), HELD_AT[job])
    asked = cancel(table.uri)
    assert asked["cancelled"] == kinds and {j["state"] for j in asked["jobs"]} == {"running"}  # not stopped yet
    held.resume()
    assert held.error is None, held.error
    run = held.outcome
    assert run.rc == 3 and run.stdout == "", (run.rc, run.stdout, run.stderr)
    (line,) = [x for x in run.stderr.splitlines() if x.startswith("memwal: error:")]
    assert f"cancelled by {BY}: {WHY}" in line and "Traceback" not in run.stderr

    table = memwal.open(table.uri).table
    assert table.dataset().version == version and lsm_rows(table) == rows  # nothing committed or deleted
    assert_only_run_records(before, tree_digest(table.uri), job,
                            also=("_mem_wal/_jobs/gc-run.json",) if job == "gc" else ())
    assert_cancelled_run(table, job, kinds)
    assert table_rows(table) == table_rows(table, version) and lsm_rows(table) == model.sorted_rows()


def test_a_catchup_cancelled_between_its_commits_records_the_first_as_its_own(make_table):
    """A catch-up that retrains two indexes commits twice (the vector index, then the scalar
    one), each after a check. Cancelled after the first check, it builds and commits the first,
    then stops at the second check: that commit is the job's in its history record and error,
    never an ``external`` commit (issue 64)."""
    table, _ = make_table()
    assert memwal.open(table.uri).merge().ok
    version = table.dataset().version
    held = Stalled(lambda: run_cli("catchup", table.uri, "--json", "--max-deltas", "1", "--max-unindexed-fraction",
                                   "0"), "catchup.fenced")
    cancel(table.uri)
    held.resume()
    run = held.outcome
    assert run.rc == 3, (run.rc, run.stderr)
    assert f"cancelled by {BY}: {WHY} (before it stopped it committed version {version + 1})" in run.stderr
    assert table.dataset().version == version + 1  # the second index was not committed
    runs = json.loads(run_cli("history", table.uri, "--json").stdout)["runs"]
    catchup = next(r for r in runs if r["job"] == "catchup")
    assert (catchup["outcome"], catchup["versions"]) == ("cancelled", [version + 1])
    assert not [r for r in runs if r["job"] == "external" and version + 1 in r["versions"]], runs


def test_fleet_cancel_wait_says_when_the_job_stopped(make_table, manual_clock):
    """``--wait`` polls the job's lease until the job let it go, then reads how its run ended."""
    table, _ = make_table()
    held = Stalled(lambda: memwal.open(table.uri).merge(), "merge.after-read")  # the CLI's streams are the waiter's
    waiting: list[dict] = []
    waiter = threading.Thread(target=lambda: waiting.append(cancel(table.uri, "--wait", "60")))
    waiter.start()
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while LeaseRecord.from_json(table.store.get(lease_key("merge"))).cancel is None:  # the waiter asked
        assert time.monotonic() < deadline and waiter.is_alive(), "the cancel was never asked"
        time.sleep(0.01)
    held.resume()  # the merge stops at its next safe point
    while waiter.is_alive():
        manual_clock.advance(1.0)
        waiter.join(0.05)
    (doc,) = waiting
    (merge,) = doc["jobs"]
    assert (merge["kind"], merge["state"], merge["outcome"]) == ("merge", "ended", "cancelled")
    assert f"cancelled by {BY}: {WHY}" in merge["error"] and merge["run_id"]
    assert held.error is not None and held.error.exit_code == 3


def test_fleet_cancel_wait_exits_1_when_the_job_did_not_stop_in_time(make_table, manual_clock):
    """A job still running when ``--wait`` ends: the cancel was asked and is recorded, the job
    may still stop at its next safe point, but the wait failed: exit 1, the job named running."""
    table, _ = make_table()
    held = Stalled(lambda: memwal.open(table.uri).merge(), "merge.after-read")
    runs: list = []
    waiter = threading.Thread(target=lambda: runs.append(
        run_cli("fleet", "cancel", table.uri, "--by", BY, "--reason", WHY, "--json", "--wait", "3")))
    waiter.start()
    while waiter.is_alive():  # the held merge never reaches a safe point while the waiter waits
        manual_clock.advance(1.0)
        waiter.join(0.05)
    (run,) = runs
    assert run.rc == 1, run.stderr
    (merge,) = json.loads(run.stdout)["jobs"]
    assert (merge["kind"], merge["state"]) == ("merge", "running")
    held.resume()  # it stops at its next safe point all the same
    assert held.error is not None and held.error.exit_code == 3


# -- the Spark engines: the job's tag is cancelled while its tasks run ----------------------------------
SPARK_STAGES = {
    "merge": "spark.merge.read-task",
    "compact": "spark.compact.task",
    "catchup": "spark.catchup.task",
}


@pytest.mark.parametrize("job", list(SPARK_STAGES))
def test_a_cancel_stops_a_spark_job_through_its_tag(make_table, spark_session, manual_clock: ManualClock,
                                                          tmp_path, job):
    # one clean line (issue 64): the Spark job named, never Py4J's text
    error = assert_cancel_stops_engine_tasks(make_table, manual_clock, tmp_path, job, "spark", SPARK_STAGES[job])
    assert "the Spark job memwal-" in error and "was interrupted" in error, error
    assert "An error occurred while calling" not in error


def assert_cancel_stops_engine_tasks(make_table, manual_clock: ManualClock, tmp_path, job: str, engine: str,
                                     stage: str) -> str:
    """``job`` on ``engine`` held inside its tasks (a barrier they reach at ``stage``): ``fleet
    cancel`` reaches the driver through the lease watch, which stops the tasks; exit 3, one
    line, nothing committed, the merge's staging removed. The error's line, for the engine's words."""
    table, model = make_table()
    prepare(table, job)
    options = {"merge": {}, "compact": {"target_rows_per_fragment": 100_000},
               "catchup": {"indexes": ["id_idx"], "max_unindexed_fraction": 0.0}}[job]
    version, rows, before = table.dataset().version, lsm_rows(table), tree_digest(table.uri)
    with Barrier(str(tmp_path / "barrier"), stage) as barrier:
        held = Stalled(lambda: getattr(memwal.open(table.uri), job)(engine=engine, **options), f"{job}.leased")
        held.go.set()  # the driver runs on; the tasks stop at the barrier
        barrier.wait_reached()
        assert cancel(table.uri)["cancelled"] == [job]
        manual_clock.advance(WATCH_SECONDS)  # the watcher reads the lease: the tasks are stopped
        held.thread.join(120)
        assert not held.thread.is_alive(), f"the {engine} tasks were not stopped"
        barrier.release()
        held.resume()
    assert held.error is not None and held.error.exit_code == 3, held.error
    error = str(held.error)
    assert f"cancelled by {BY}: {WHY}" in error and "its running work was stopped" in error
    assert "\n" not in error and "Traceback" not in error

    table = memwal.open(table.uri).table
    assert table.dataset().version == version and lsm_rows(table) == rows
    if job == "merge":  # its staging removed once its tasks ended
        assert_only_run_records(before, tree_digest(table.uri), job)
    assert_cancelled_run(table, job, [job])
    assert lsm_rows(table) == model.sorted_rows()
    return error


def test_a_cancel_stops_a_spark_gc_before_its_next_round_of_deletes(make_table, spark_session):
    """GC's Spark tasks delete: a round is never cut short; the driver's lease check before each
    round is the safe point. Held after its drains, before its first round: nothing is deleted."""
    from memwal.table.shards import list_generation_dirs

    table, model = make_table()
    prepare(table, "gc")
    shards = sorted(all_shard_ids(table))
    before = {s: list_generation_dirs(table.store, s) for s in shards}
    options = {"grace_seconds": 0, "writer_idle_seconds": 0, "expire_versions": 0}
    assert len(memwal.open(table.uri).gc(dry_run=True, **options).value.deleted) == 12  # work for its rounds
    held = Stalled(lambda: memwal.open(table.uri).gc(engine="spark", **options), "gc.before-delete")
    assert cancel(table.uri)["cancelled"] == ["gc"]
    held.resume()
    assert held.error is not None and held.error.exit_code == 3 and f"cancelled by {BY}: {WHY}" in str(held.error)
    assert "after its work was done" not in str(held.error)  # stopped before a round, not at the end
    assert {s: list_generation_dirs(table.store, s) for s in shards} == before  # no round ran
    assert_cancelled_run(table, "gc", ["gc"])
    assert lsm_rows(table) == model.sorted_rows()


def test_a_cancel_stops_gc_between_two_rollups_its_staging_removed(make_table):
    """A live writer's view needs its merged generations listed, so GC rolls each shard's up
    (issue 54). Held right after the first rollup's check, GC is asked to stop: it writes that
    rollup and removes its staging (not a safe point: the rollup is half-done until then), then
    stops at the next rollup's check. Its folder is left unlisted (what a crash there leaves);
    no shard manifest is rewritten, no table version made, nothing deleted."""
    table, model = make_table()
    t = memwal.open(table.uri)
    assert t.merge(max_generations=2).ok and t.merge().ok and t.catchup().ok
    version, rows, before = table.dataset().version, lsm_rows(table), tree_digest(table.uri)
    flags = ["--grace-seconds", "0", "--expire-versions", "never"]  # the writers live: rollups, no drains
    held = Stalled(lambda: run_cli("gc", table.uri, "--json", *flags), "gc.before-rollup")
    assert cancel(table.uri)["cancelled"] == ["gc"]
    held.resume()
    assert held.error is None, held.error
    run = held.outcome
    assert run.rc == 3 and f"cancelled by {BY}: {WHY}" in run.stderr, run.stderr

    after = tree_digest(table.uri)
    assert not set(before) - set(after)  # nothing deleted
    assert [k for k in before if before[k] != after[k]] == []  # no shard manifest rewritten
    written = {"/".join(k.split("/")[:3]) for k in set(after) - set(before)
               if not k.startswith(("_mem_wal/_jobs/", "_mem_wal/_staging/"))}
    assert len(written) == 1 and "_gen_" in written.pop()  # the one rollup folder written before the cancel
    assert [k for k in after if k.startswith("_mem_wal/_staging/rollup-")] == []  # its staging removed
    table = memwal.open(table.uri).table
    assert table.dataset().version == version and lsm_rows(table) == rows == model.sorted_rows()
    assert_cancelled_run(table, "gc", ["gc"])


def all_shard_ids(table) -> list[str]:
    from memwal.table.shards import all_shard_manifests

    return list(all_shard_manifests(table.store))


def test_a_cancelled_cycle_exits_3_and_a_cancelled_airflow_task_is_skipped_not_retried(make_table):
    """``memwal cycle`` ends with exit 3 and the cancel's line; an Airflow task whose job was
    cancelled is skipped (never retried, and the tasks after it are skipped too), not failed
    as a lost lease."""
    from airflow.sdk.exceptions import AirflowSkipException
    from memwal.airflow.operators import MemWalMergeOperator

    from tests.integration.test_airflow import context

    table, _ = make_table()
    held = Stalled(lambda: run_cli("cycle", table.uri, "--jobs", "merge,compact"), "merge.after-read")
    cancel(table.uri)
    held.resume()
    run = held.outcome
    assert run.rc == 3 and run.stderr.strip().splitlines()[-1].startswith("memwal: error: merge on ")
    compact = next(line.split() for line in run.stdout.splitlines() if line.strip().startswith("compact"))
    assert f"cancelled by {BY}: {WHY}" in run.stderr and compact[:4] == ["compact", "not-run", "not", "run:"]

    op = MemWalMergeOperator(task_id="merge", table=table.uri)
    held = Stalled(lambda: op.execute(context()), "merge.after-read")
    cancel(table.uri)
    held.resume()
    assert isinstance(held.error, AirflowSkipException), held.error
    assert f"cancelled by {BY}: {WHY}" in str(held.error) and "lease" not in str(held.error)
