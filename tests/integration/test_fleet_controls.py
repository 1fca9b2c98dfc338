"""The operator's controls on real tables written by pylance's ShardWriter, through the CLI.

Pauses (in the policy, and set with ``memwal fleet pause`` in a state folder, with who and why)
withhold a table's jobs and show why; a quiet-hours window holds the jobs it names until it
ends (``waiting``); a GC that only time can free is ``waiting`` apart from ``behind``; a table
past its service level says so; a run leaves a paused table untouched; the failure history
keeps a failed job's reason; the start order serves tables no live writer will drain first,
then those past a service level, then by debt.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import memwal
from memwal.demo import Workload, create_base_table, shard_ids_for, write_generations
from memwal.table import open_table
from memwal.table.shards import all_shard_manifests
from tests.helpers import assert_one_line_error, run_cli, tree_digest

WL = Workload(base_rows=120, shards=2, generations=3, rows_per_generation=10, seed=11, indexes=False)


def make(path: Path, *, merged: bool = False) -> str:
    model = create_base_table(str(path), WL)[1]
    write_generations(str(path), WL, model)
    if merged:
        t = memwal.open(str(path))
        assert t.merge().ok and t.compact().ok and t.snapshot().ok
    return str(path)


def plan(*argv: str) -> dict:
    run = run_cli("fleet", "plan", *argv, "--json")
    assert run.rc == 0, run.stderr
    return {t["table"]: t for t in json.loads(run.stdout)["tables"]}


def test_pauses_quiet_hours_waits_and_breaches_say_why_and_withhold_the_work(tmp_path):
    lake = tmp_path / "lake"
    backlog, merged, other = make(lake / "backlog"), make(lake / "merged", merged=True), make(lake / "other")
    now = datetime.now(UTC)
    window = {"from": f"{(now - timedelta(hours=1)):%H:%M}", "to": f"{(now + timedelta(hours=1)):%H:%M}",
              "jobs": ["snapshot"], "match": other}
    policy = tmp_path / "policy.yaml"
    policy.write_text(json.dumps({"defaults": {"slo": {"generations_per_shard": 2}},
                                  "paused": {backlog: {"by": "ops", "reason": "a bad partition"}},
                                  "quiet_hours": [window]}))
    tables = plan(str(lake), "--policy", str(policy))
    t = tables[backlog]
    assert t["status"] == "paused" and t["jobs"] == [] and t["debt"] > 0
    assert t["paused"]["by"] == "ops" and t["reasons"][0].startswith("paused by ops: a bad partition")
    assert [b["slo"] for b in t["breaches"]] == ["generations_per_shard"]  # 3 unmerged in a shard, target 2
    m = tables[merged]
    assert m["status"] == "waiting" and m["jobs"] == [] and "gc" in m["waiting"]  # GC: grace and version expiry
    assert any("wait for the reader grace period" in r for r in m["reasons"])
    o = tables[other]
    assert o["status"] == "behind" and "snapshot" not in o["jobs"] and "snapshot" in o["waiting"]
    assert any(r.startswith("snapshot: quiet hours until") for r in o["reasons"])

    # a run leaves the paused table untouched
    before = tree_digest(backlog)
    run = run_cli("fleet", "run", str(lake), "--policy", str(policy), "--max-rounds", "1", "--json")
    assert run.rc == 0, run.stderr
    assert backlog not in {r["table"] for r in json.loads(run.stdout)["runs"]} and tree_digest(backlog) == before


def test_pause_and_resume_from_the_cli_are_recorded_in_the_state_with_who_and_why(tmp_path):
    lake = tmp_path / "lake"
    table = make(lake / "t1")
    state = str(tmp_path / "state")
    assert_one_line_error(run_cli("fleet", "pause", table, "--state", state, "--by", "", "--reason", "x"), 2, "who")
    assert not Path(state).exists()  # bad input: nothing written
    run = run_cli("fleet", "pause", table, "--state", state, "--by", "alice", "--reason", "looking into it")
    assert run.rc == 0, run.stderr
    t = plan(str(lake), "--state", state)[table]
    assert t["status"] == "paused" and t["paused"]["by"] == "alice" and t["paused"]["reason"] == "looking into it"
    assert run_cli("fleet", "resume", table, "--state", state, "--by", "alice", "--reason", "fine").rc == 0
    assert plan(str(lake), "--state", state)[table]["status"] == "behind"
    log = json.loads((Path(state) / "controls.json").read_text())["log"]
    assert [(e["action"], e["by"], e["reason"]) for e in log] == [("pause", "alice", "looking into it"),
                                                                  ("resume", "alice", "fine")]


def test_the_failure_history_keeps_each_failed_jobs_reason(tmp_path):
    lake = tmp_path / "lake"
    broken = make(lake / "broken")
    st = all_shard_manifests(open_table(broken).store)[shard_ids_for(WL)[0]]
    gen = Path(broken, st.generation_key(st.generation(2)))
    gen.rename(gen.with_name("moved-away"))
    state = str(tmp_path / "state")
    assert run_cli("fleet", "run", str(lake), "--state", state, "--max-rounds", "1").rc == 1
    run = run_cli("fleet", "failures", broken, "--state", state, "--json")
    assert run.rc == 0, run.stderr
    (failure,) = json.loads(run.stdout)["failures"]
    assert failure["table"] == broken and failure["job"] == "merge" and "generation" in failure["error"]
    report = json.loads((Path(state) / "plan.json").read_text())["report"]
    assert report["discovered"] == 1


def test_tables_past_their_service_level_start_first_then_by_debt(tmp_path):
    """Two tables with work: the one with more debt but within its service level starts after
    the one past it (earliest deadline first), as the runner's order and the DAG's chunks."""
    from memwal.fleet.plan import plan_fleet
    from memwal.fleet.policy import policy_from
    from memwal.fleet.sources import discover

    lake = tmp_path / "lake"
    make(lake / "other")
    small = make(lake / "small")
    heavy = Workload(base_rows=120, shards=2, generations=8, rows_per_generation=10, seed=12, indexes=False)
    model = create_base_table(str(lake / "heavy"), heavy)[1]
    write_generations(str(lake / "heavy"), heavy, model)
    policy = policy_from({"tables": {small: {"slo": {"oldest_unmerged_seconds": 0.001}}}})
    fleet = plan_fleet(discover([str(lake)]), policy)
    by_debt = [t.table for t in fleet.tables]
    started = [t.table for t in fleet.with_work()]
    assert by_debt[0] == str(lake / "heavy") and started[0] == small  # past its target: first
    assert started[1:] == [t for t in by_debt if t != small]
