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
from memwal.core.waits import when
from memwal.demo import Workload, create_base_table, shard_ids_for, write_generations
from memwal.table import open_table
from memwal.table.shards import all_shard_manifests
from tests.browser import parse
from tests.helpers import assert_one_line_error, run_cli, tree_digest

WL = Workload(base_rows=120, shards=2, generations=3, rows_per_generation=10, seed=11, indexes=False)


def make(path: Path, *, merged: bool = False, collected: bool = True) -> str:
    """A table of WL; ``merged``: its cycle ran (``collected``: GC too, which rolls up what
    readers list: the folders wait for the grace period)."""
    model = create_base_table(str(path), WL)[1]
    write_generations(str(path), WL, model)
    if merged:
        t = memwal.open(str(path))
        assert t.merge().ok and t.compact().ok and (not collected or t.gc().ok) and t.snapshot().ok
    return str(path)


def plan(*argv: str) -> dict:
    run = run_cli("fleet", "plan", *argv, "--json")
    assert run.rc == 0, run.stderr
    return {t["table"]: t for t in json.loads(run.stdout)["tables"]}


def test_pauses_quiet_hours_waits_and_breaches_say_why_and_withhold_the_work(tmp_path):
    lake = tmp_path / "lake"
    backlog, merged, other = make(lake / "backlog"), make(lake / "merged", merged=True), make(lake / "other")
    listed = make(lake / "listed", merged=True, collected=False)
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
    # no GC has judged them (a plan with no state: no run log): the plan's estimate, said as one
    assert any("no GC has judged them yet: the plan expects the reader grace period" in r for r in m["reasons"])
    assert m["state"]["max_shard_listed"] == 1 and not m["breaches"]  # what GC's rollup left listed
    # nothing unmerged, yet every reader opens its 3 merged generations a shard: past the target,
    # and GC's work at once (it rolls them up), though no folder can go before the grace period
    lt = tables[listed]
    assert lt["state"]["unmerged_generations"] == 0 and lt["state"]["max_shard_listed"] == 3
    assert [b["slo"] for b in lt["breaches"]] == ["generations_per_shard"]
    assert "slo: 3 generations listed in one shard (every reader opens them), target 2" in lt["reasons"]
    assert lt["status"] == "behind" and lt["jobs"] == ["gc"] and "gc" not in lt["waiting"]
    assert "gc: 6 merged generations still listed (every reader opens them): rolled up or drained" in lt["reasons"]
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


def test_tables_no_live_writer_will_drain_start_first_by_gcs_own_writer_idle_setting(tmp_path):
    """A shard with unmerged generations and no write for GC's ``writer_idle_seconds`` has no
    live writer: its table starts before one with more debt, and says why with that setting
    (one setting for the fleet and GC, issue 57); the fleet's former key is refused, naming it."""
    from memwal.fleet.plan import plan_fleet
    from memwal.fleet.policy import policy_from
    from memwal.fleet.sources import discover

    lake = tmp_path / "lake"
    small = make(lake / "small")
    heavy = Workload(base_rows=120, shards=2, generations=8, rows_per_generation=10, seed=12, indexes=False)
    write_generations(str(lake / "heavy"), heavy, create_base_table(str(lake / "heavy"), heavy)[1])
    policy = policy_from({"tables": {small: {"options": {"gc": {"writer_idle_seconds": 0}}}}})
    fleet = plan_fleet(discover([str(lake)]), policy)
    started = [t.table for t in fleet.with_work()]
    by_debt = [t.table for t in fleet.tables]
    assert by_debt.index(small) > 0 and started[0] == small
    why = next(t for t in fleet.tables if t.table == small).reasons
    assert any(r.startswith("no live writer: 2 shards") and "unwritten for 0 s" in r for r in why), why
    assert not any("no live writer" in r for t in fleet.tables if t.table != small for r in t.reasons)
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps({"defaults": {"thresholds": {"writer_gone_seconds": 60}}}))
    run = run_cli("fleet", "plan", str(lake), "--policy", str(policy_file))
    assert_one_line_error(run, 2, "defaults.thresholds.writer_gone_seconds: no longer a key; set "
                               "options.gc.writer_idle_seconds")


def status(state: str, *extra: str) -> tuple[int, dict, str]:
    run = run_cli("fleet", "status", "--state", state, "--json", *extra)
    return run.rc, (json.loads(run.stdout) if run.stdout else {}), run.stderr


def test_a_run_of_one_table_is_merged_into_the_fleets_report_which_shows_what_the_run_did(tmp_path):
    """``fleet run TABLE --state S`` updates that table's row of the last report (the fleet stays
    whole), and the row then says what the run did, when, and how the table stands after it: not
    the plan made before the run."""
    lake = tmp_path / "lake"
    tables = [make(lake / f"t{i}") for i in range(3)]
    state = str(tmp_path / "state")
    assert run_cli("fleet", "plan", str(lake), "--state", state).rc == 0
    rc, before, _ = status(state)
    assert rc == 0 and before["discovered"] == 3 and before["by_state"]["behind"] == 3

    run = run_cli("fleet", "run", tables[0], "--state", state, "--max-rounds", "1", "--policy",
                  str(quiet_policy(tmp_path)))
    assert run.rc == 0, run.stderr
    rc, after, _ = status(state)
    assert rc == 0 and after["discovered"] == 3  # the fleet's report, not a one-table one
    rows = {t["table"]: t for t in after["tables"]}
    assert set(rows) == set(tables)
    ran = rows[tables[0]]
    # GC follows the merge: it rolls up what readers list, its deletions wait for the writer
    assert ran["last_run"]["outcome"] == "waiting" and ran["last_run"]["at"] is not None
    assert [(j["job"], j["status"]) for j in ran["last_run"]["jobs"]] == [("merge", "done"), ("gc", "waiting"),
                                                                         ("snapshot", "done")]
    assert ran["lag_generations"] == 0 and not any(r.startswith("merge:") for r in ran["reasons"])  # after the run
    assert rows[tables[1]]["state"] == "behind" and rows[tables[1]]["last_run"] is None
    text = run_cli("fleet", "status", "--state", state).stdout
    assert "last run " in text and ": waiting: merge done, gc waiting (" in text and "), snapshot done" in text


def quiet_policy(tmp_path: Path) -> Path:
    """No compaction for these small tables (the merge's deletions would ask for one)."""
    path = tmp_path / "quiet.yaml"
    path.write_text(json.dumps({"defaults": {"thresholds": {"compact_deleted_fraction": 1}}}))
    return path


def test_pauses_are_read_live_and_a_paused_row_says_why_once(tmp_path):
    lake = tmp_path / "lake"
    t1, _ = make(lake / "t1"), make(lake / "t2")
    state = str(tmp_path / "state")
    assert run_cli("fleet", "plan", str(lake), "--state", state).rc == 0
    assert run_cli("fleet", "pause", t1, "--state", state, "--by", "alice", "--reason", "backfill running").rc == 0
    rc, doc, _ = status(state)  # no plan since the pause: read live
    rows = {t["table"]: t for t in doc["tables"]}
    assert rows[t1]["state"] == "paused" and rows[t1]["paused"]["by"] == "alice"
    assert doc["by_state"]["paused"] == 1 and doc["by_state"]["behind"] == 1
    assert [p["target"] for p in doc["pauses"]] == [t1]

    assert run_cli("fleet", "plan", str(lake), "--state", state).rc == 0  # planned while paused
    html = tmp_path / "fleet.html"
    text = run_cli("fleet", "status", "--state", state, "--html", str(html)).stdout
    assert text.count("backfill running") == 1  # said once, not in the reasons again
    (row,) = [r for r in parse(html.read_text()).select("tr.table-row") if r.attrs["data-table"] == t1]
    assert row.attrs["data-state"] == "paused"
    assert sum("backfill running" in li.text for li in row.select("ul.reasons li")) == 1
    assert run_cli("fleet", "resume", t1, "--state", state, "--by", "alice", "--reason", "done").rc == 0
    rc, doc, _ = status(state)
    row = {t["table"]: t for t in doc["tables"]}[t1]
    assert row["state"] == "behind" and row["paused"] is None and row["reasons"][0].startswith("resumed since")
    assert doc["pauses"] == []


def test_input_that_matches_nothing_is_said_or_refused(tmp_path):
    """A policy key that names no table is a warning naming it (a folder is no glob); a pause of a
    table that does not exist, or of a glob that matches none, is refused with exit 2 and
    nothing written; a resume of what is not paused is refused too."""
    lake = tmp_path / "lake"
    t1 = make(lake / "hot" / "t1")
    policy = tmp_path / "policy.yaml"
    folder = str(lake / "hot")
    policy.write_text(json.dumps({"tables": {folder: {"weights": {"merge": 5}}},
                                  "quotas": {"cold": {"share": 0.5, "match": [str(lake / "cold" / "*")]}}}))
    run = run_cli("fleet", "plan", str(lake), "--policy", str(policy), "--json")
    assert run.rc == 0, run.stderr
    warnings = [x for x in run.stderr.splitlines() if x.startswith("memwal: warning:")]
    assert len(warnings) == 2
    assert f'tables.{json.dumps(folder)}: matches no table of the fleet (tables lie under it: ' \
           f'{json.dumps(folder + "/*")} matches them)' in warnings[0]
    assert "quotas.cold.match: matches no table of the fleet" in warnings[1]
    assert len(json.loads(run.stdout)["unmatched"]) == 2

    state = tmp_path / "state"
    assert run_cli("fleet", "plan", str(lake), "--state", str(state)).rc == 0
    before = (state / "controls.json").exists()
    for target in (str(lake / "nowhere"), str(lake / "cold" / "*"), folder):
        refused = run_cli("fleet", "pause", target, "--state", str(state), "--by", "a", "--reason", "b")
        assert_one_line_error(refused, 2, target, "matches no table of the fleet")
    assert (state / "controls.json").exists() == before is False  # nothing written
    refused = run_cli("fleet", "pause", folder, "--state", str(state), "--by", "a", "--reason", "b")
    assert f"{folder}/* matches them" in refused.stderr
    # every table of this fleet, and no fleet key: confirmed
    assert run_cli("fleet", "pause", f"{folder}/*", "--state", str(state), "--by", "a", "--reason", "b",
                   "--yes").rc == 0
    assert_one_line_error(run_cli("fleet", "resume", t1, "--state", str(state), "--by", "a", "--reason", "b"), 2,
                          t1, "not paused")
    assert json.loads((state / "controls.json").read_text())["log"][-1]["action"] == "pause"  # nothing logged

    fresh = tmp_path / "fresh-state"  # no plan yet: a table is known by being one
    assert run_cli("fleet", "pause", t1, "--state", str(fresh), "--by", "a", "--reason", "b").rc == 0


def test_status_check_exits_1_on_a_breach_and_a_run_that_clears_it_leaves_none(tmp_path):
    """Service levels are judged on the state after the run: a backlog past its target is a
    breach before the run (``status --check`` exits 1, naming the table); the run that merges it
    plans the table again, and the report it leaves has no breach (exit 0)."""
    lake = tmp_path / "lake"
    t1 = make(lake / "t1")
    policy = tmp_path / "slo.yaml"
    policy.write_text(json.dumps({"defaults": {"slo": {"generations_per_shard": 2},
                                               "thresholds": {"compact_deleted_fraction": 1}}}))
    state = str(tmp_path / "state")
    assert run_cli("fleet", "plan", str(lake), "--state", state, "--policy", str(policy)).rc == 0
    rc, _, err = status(state, "--check")
    assert rc == 1 and f"memwal: error: {t1}: past its service level generations_per_shard: 3" in err
    assert status(state)[0] == 0  # without --check, a breach is a figure, not a failure
    run = run_cli("fleet", "run", str(lake), "--state", state, "--policy", str(policy), "--max-rounds", "1")
    assert run.rc == 0, run.stderr
    rc, doc, err = status(state, "--check")
    assert rc == 0 and err == "" and doc["breaches"]["tables"] == 0


def test_a_waiting_gc_names_the_gate_gc_named_and_when_it_frees(tmp_path):
    """The writers of these tables wrote a moment ago, so GC keeps what their views need
    (``writer-live``, as ``memwal gc --dry-run`` says): the fleet's status and page say that gate,
    how many it keeps, and that it frees when the writer reopens or is quiet for GC's idle time,
    not the grace period's time."""
    lake = tmp_path / "lake"
    t1 = make(lake / "t1")
    policy = tmp_path / "policy.yaml"
    policy.write_text(json.dumps({"defaults": {"options": {"gc": {"grace_seconds": 0, "expire_versions": 0}},
                                               "thresholds": {"compact_deleted_fraction": 1}}}))
    state = str(tmp_path / "state")
    run = run_cli("fleet", "run", str(lake), "--state", state, "--policy", str(policy), "--json")
    assert run.rc == 0, run.stderr
    gcs = [j for r in json.loads(run.stdout)["runs"] for j in r["jobs"] if j["job"] == "gc"]
    assert gcs and gcs[-1]["status"] == "waiting"
    n = int(gcs[-1]["summary"].split(" blocked")[0].rsplit(" ", 1)[1])  # "0 deleted, 6 blocked; ..."
    assert n > 0, gcs[-1]
    # the gate GC names: the run rolled the merged generations up, so a dry run now keeps the
    # rollups too (more of them), for the same gate
    dry = run_cli("gc", t1, "--dry-run", "--grace-seconds", "0", "--expire-versions", "0")
    (blocked,) = [x.strip() for x in dry.stdout.splitlines() if x.strip().startswith("blocked:")]
    said = "writer-live: when its writer reopens or goes quiet; writer-live: when the writer reopens or is quiet " \
           "for 1d 0h (not before "
    assert blocked.split(" x ", 1)[1].startswith(said), dry.stdout
    kept = f"{n} x writer-live"

    rc, doc, _ = status(state)
    row = {t["table"]: t for t in doc["tables"]}[t1]
    assert row["gc"]["gates"] == {"writer-live": n} and row["gc"]["frees_at"] is None
    said = " ".join(row["reasons"])
    assert f"kept {n}: {kept}" in said
    assert "writer-live: when the writer reopens or is quiet for 1d 0h" in said
    assert "grace period" not in said.split("the last GC", 1)[1]  # not the grace period's time
    # judged with the fleet's GC options, not the command line's defaults: the dry run that shows the same
    assert "memwal gc TABLE --dry-run --grace-seconds 0 --expire-versions 0 --writer-idle-seconds 86400 shows the " \
           "same gates" in said, said
    html = tmp_path / "fleet.html"
    assert run_cli("fleet", "status", "--state", state, "--html", str(html)).rc == 0
    assert "when the writer reopens or is quiet for 1d 0h" in html.read_text()
    # memwal status says the same gate, with the time it passes under GC's default idle period
    shards = json.loads(run_cli("status", t1, "--json").stdout)["shards"]
    live = [s for s in shards if s["writer_live"] and s["merged_listed"]]
    text = run_cli("status", t1).stdout
    assert live, shards
    for s in live:
        assert f"drains them when the writer reopens or is quiet for 1d 0h (not before " \
               f"{when(s['writer_last_activity'] + 86400)}" in text, text
