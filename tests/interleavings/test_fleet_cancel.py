"""Cancelling a table's running work: it stops where nothing is half-done, its leases released.

A compaction held right after its tasks wrote their fragments (step ``compact.after-tasks``,
before its commit) while an operator runs ``memwal fleet cancel``: the compaction stops at its
next check without committing (the table's version, rows and fragments as before), its lease
is released with no cancel request left in it, the cycle's later jobs are not run, and the
cancel is in the fleet's control log with who and why. With nothing running, a cancel asks
nobody and writes nothing to the table.
"""

from __future__ import annotations

import json

import memwal
from memwal.actions import ACTIONS
from memwal.cycle import JobStatus, run_cycle_at
from memwal.demo import Workload, create_base_table, write_generations
from memwal.fleet.state import FleetState
from memwal.history.log import read_runs
from memwal.lease import LeaseRecord, lease_key
from memwal.table import open_table
from tests.conftest import table_rows
from tests.helpers import run_cli, tree_digest
from tests.interleave import Stalled

WL = Workload(base_rows=200, shards=2, generations=6, rows_per_generation=15, seed=23, indexes=False)
WL_INDEXED = Workload(base_rows=200, shards=2, generations=3, rows_per_generation=15, seed=24)


def test_a_cancel_stops_a_compaction_before_its_commit_and_releases_its_lease(tmp_path):
    uri = str(tmp_path / "t")
    model = create_base_table(uri, WL)[1]
    write_generations(uri, WL, model)
    t = memwal.open(uri)
    for _ in range(WL.generations):  # one fragment per merge: work for the compaction
        assert t.merge(max_generations=1).ok
    table = open_table(uri)
    version, fragments = table.dataset().version, len(table.dataset().get_fragments())
    assert fragments >= 6
    options = {job: ACTIONS[job].options.from_kwargs(**({"grace_seconds": 0} if job == "gc" else {}))
               for job in ("compact", "snapshot", "gc")}
    state = str(tmp_path / "fleet-state")

    held = Stalled(lambda: run_cycle_at(uri, None, ["compact", "snapshot", "gc"], options), "compact.after-tasks")
    record = LeaseRecord.from_json(table.store.get(lease_key("compact")))
    assert record.live(record.renewed_at or 0) and record.cancel is None
    cancel = run_cli("fleet", "cancel", uri, "--by", "alice", "--reason", "a bad hour for it", "--state", state,
                     "--json")
    assert cancel.rc == 0, cancel.stderr
    assert json.loads(cancel.stdout)["cancelled"] == ["compact"]
    asked = LeaseRecord.from_json(table.store.get(lease_key("compact")))
    assert asked.token == record.token and asked.holder == record.holder and asked.cancel["by"] == "alice"
    held.resume()
    assert held.error is None, held.error
    cycle = held.outcome
    compact, snapshot, gc = cycle.jobs
    assert compact.status is JobStatus.CANCELLED and "cancelled by alice: a bad hour for it" in compact.summary
    assert compact.exit_code == 3 and cycle.failed is None
    assert [(j.status, j.summary) for j in (snapshot, gc)] == [
        (JobStatus.NOT_RUN, "not run: cancelled by alice: a bad hour for it")] * 2

    table = open_table(uri)
    assert table.dataset().version == version and len(table.dataset().get_fragments()) == fragments  # no commit
    assert table_rows(table) == model.sorted_rows()
    released = LeaseRecord.from_json(table.store.get(lease_key("compact")))
    assert released.expires_at == 0 and released.token == record.token and released.cancel is None
    log = FleetState(state).read("controls.json")[0]["log"]
    assert [(e["action"], e["target"], e["by"], e["reason"]) for e in log] == [
        ("cancel", uri, "alice", "a bad hour for it")]

    # a later compaction runs: the cancel stopped that run only
    assert memwal.open(uri).compact().value.version is not None

    before = tree_digest(uri)
    idle = run_cli("fleet", "cancel", uri, "--by", "alice", "--reason", "again", "--json")
    assert idle.rc == 0 and json.loads(idle.stdout)["cancelled"] == []
    assert tree_digest(uri) == before  # nothing running: nothing written to the table


def test_a_fleet_run_skips_a_cancelled_table_for_the_rest_of_the_run(tmp_path):
    """Catch-up held before its commit in round 1, cancelled: it ends ``cancelled`` (not ``ok``),
    the cycle's later jobs are not run, and no later round of the run starts any job on the table,
    though its plan still owes some."""
    from memwal.fleet.policy import policy_from
    from memwal.fleet.run import run_fleet

    lake = tmp_path / "lake"
    uri, other = str(lake / "t"), str(lake / "other")  # the other, without an index, keeps the run going
    for path, workload in ((uri, WL_INDEXED), (other, WL)):
        model = create_base_table(path, workload)[1]
        write_generations(path, workload, model)
    policy = policy_from({"defaults": {"options": {"gc": {"grace_seconds": 0, "writer_idle_seconds": 0}}}})
    held = Stalled(lambda: run_fleet([str(lake)], policy=policy, max_rounds=4), "catchup.before-build",
                   any_thread=True)
    cancel = run_cli("fleet", "cancel", uri, "--by", "alice", "--reason", "enough for today", "--json")
    assert json.loads(cancel.stdout)["cancelled"] == ["catchup"]
    held.resume()
    assert held.error is None, held.error
    result = held.outcome
    (first,) = [r for r in result.rounds[0].results if r.table == uri]
    statuses = {j.job: (j.status, j.summary) for j in first.jobs}
    assert statuses["merge"][0] is JobStatus.DONE
    assert statuses["catchup"][0] is JobStatus.CANCELLED and "cancelled by alice: enough for today" in \
        statuses["catchup"][1]
    assert all(s is JobStatus.NOT_RUN for job, (s, _) in statuses.items() if job not in ("merge", "catchup"))
    later = [r for rnd in result.rounds[1:] for r in rnd.results if r.table == uri]
    assert later == [] and len(result.rounds) >= 2  # planned again, but not started again
    (replanned,) = [t for t in result.rounds[1].plan.tables if t.table == uri]
    assert replanned.jobs  # it still owes work: skipped, not idle
    assert next(read_runs(open_table(uri).store, job="catchup")).outcome == "cancelled"


def test_fleet_run_exits_3_naming_the_cancelled_table(tmp_path):
    from memwal.lease.cancel import request_cancel

    lake = tmp_path / "lake"
    uri = str(lake / "t")
    model = create_base_table(uri, WL)[1]
    write_generations(uri, WL, model)
    held = Stalled(lambda: run_cli("fleet", "run", str(lake)), "merge.after-read", any_thread=True)
    assert request_cancel(open_table(uri).store, "alice", "not today") == ["merge"]  # the CLI's streams are the run's
    held.resume()
    run = held.outcome
    assert run.rc == 3, (run.stdout, run.stderr)
    assert f"memwal: error: merge on {uri}: cancelled by alice: not today" in run.stderr
    assert "merge cancelled" in run.stdout
