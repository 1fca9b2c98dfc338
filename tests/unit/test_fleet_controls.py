"""The fleet's controls and service levels, as pure rules: quotas with borrowing, quiet hours,
pauses recorded in a state folder with who and why, SLO breaches, the histogram of pending
generations, the run log, and what an S3 notification names."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from memwal.errors import BadInputError
from memwal.fleet import control_log as controls
from memwal.fleet.controls import Controls, Pause
from memwal.fleet.policy import policy_from
from memwal.fleet.quota import fair_order, shares
from memwal.fleet.runs import backoff_of, failures_of, record_results
from memwal.fleet.slo import histogram
from memwal.fleet.state import FleetState


def test_quotas_give_each_group_its_share_and_lend_what_an_idle_group_leaves():
    policy = policy_from({"quotas": {"hot": {"share": 0.5, "match": "s3://lake/hot/*"},
                                     "cold": {"share": 0.25, "match": ["s3://lake/cold"]}}})
    group = {q.name for q in policy.quotas}
    assert group == {"hot", "cold"} and shares(policy.quotas)["default"] == 0.25
    items = [("hot", i) for i in range(6)] + [("cold", i) for i in range(6)] + [("default", i) for i in range(6)]
    order = fair_order(items, lambda it: it[0], shares(policy.quotas))
    first8 = [g for g, _ in order[:8]]
    assert first8.count("hot") == 4 and first8.count("cold") == 2 and first8.count("default") == 2
    assert [i for g, i in order if g == "hot"] == list(range(6))  # each group keeps its own order
    # the cold group idle: hot and default share its part (borrowing), in their 2:1 ratio
    busy = fair_order([it for it in items if it[0] != "cold"], lambda it: it[0], shares(policy.quotas))
    assert [g for g, _ in busy[:6]].count("hot") == 4
    # a group with no share runs only on what the others leave: after them
    none_left = fair_order(items, lambda it: it[0], {"hot": 0.5, "cold": 0.5, "default": 0.0})
    assert [g for g, _ in none_left[-6:]] == ["default"] * 6
    with pytest.raises(BadInputError, match="sum to 1.5"):
        policy_from({"quotas": {"a": {"share": 1, "match": "x"}, "b": {"share": 0.5, "match": "y"}}})
    with pytest.raises(BadInputError, match="quotas.a.share"):
        policy_from({"quotas": {"a": {"share": 0, "match": "x"}}})


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_quiet_hours_hold_the_jobs_they_name_on_the_tables_they_match_until_the_window_ends():
    policy = policy_from({"quiet_hours": [
        {"from": "08:00", "to": "18:00", "days": ["mon", "tue", "wed", "thu", "fri"], "jobs": ["compact", "gc"],
         "match": "s3://lake/hot/*"},
        {"from": "22:00", "to": "02:00"}]})
    ctl = policy.controls()
    monday_noon, saturday_noon = at("2026-11-23T12:00:00"), at("2026-11-28T12:00:00")
    assert ctl.quiet_until("s3://lake/hot/t", "s3://lake/hot", "gc", monday_noon) == at("2026-11-23T18:00:00")
    assert ctl.quiet_until("s3://lake/hot/t", "s3://lake/hot", "merge", monday_noon) is None  # not a job it names
    assert ctl.quiet_until("s3://lake/cold/t", "s3://lake/cold", "gc", monday_noon) is None  # not a table it matches
    assert ctl.quiet_until("s3://lake/hot/t", "s3://lake/hot", "gc", saturday_noon) is None  # not a day it names
    # across midnight, every job, every table: from 22:00 until 02:00 the next day
    assert ctl.quiet_until("s3://x/t", "s3://x", "merge", at("2026-11-24T01:30:00")) == at("2026-11-24T02:00:00")
    assert ctl.quiet_until("s3://x/t", "s3://x", "merge", at("2026-11-24T23:00:00")) == at("2026-11-25T02:00:00")
    assert ctl.quiet_until("s3://x/t", "s3://x", "merge", at("2026-11-24T02:00:00")) is None
    with pytest.raises(BadInputError, match=r"quiet_hours\[0\].from: expected a time HH:MM"):
        policy_from({"quiet_hours": [{"from": "8am", "to": "18:00"}]})
    with pytest.raises(BadInputError, match=r"quiet_hours\[0\].jobs: 'vacuum' is not one of"):
        policy_from({"quiet_hours": [{"from": "08:00", "to": "18:00", "jobs": ["vacuum"]}]})


def test_pauses_are_recorded_with_who_why_and_when_and_a_tables_own_pause_wins(tmp_path):
    state = FleetState(str(tmp_path / "state"))
    with pytest.raises(BadInputError, match="who you are"):
        controls.pause(state, "s3://lake/t1", by=" ", reason="why", now=1.0)
    assert not (tmp_path / "state" / "controls.json").exists()  # nothing written
    controls.pause(state, "s3://lake", by="alice", reason="migration", now=100.0)
    controls.pause(state, "s3://lake/t1", by="bob", reason="a bad partition", now=200.0)
    policy = policy_from({"paused": {"s3://lake/legacy/*": {"by": "ops", "reason": "read only"}}})
    ctl = policy.controls().with_state(controls.stored_pauses(state.read("controls.json")[0], state.uri))
    own = ctl.paused("s3://lake/t1", "s3://lake")
    assert (own.by, own.reason, own.at, own.origin) == ("bob", "a bad partition", 200.0, "state")
    assert ctl.paused("s3://lake/t2", "s3://lake").by == "alice"  # the source's pause
    assert ctl.paused("s3://lake/legacy/x", "s3://elsewhere").origin == "policy"
    doc = controls.resume(state, "s3://lake/t1", by="bob", reason="fixed", now=300.0)
    assert [p["target"] for p in doc["pauses"]] == ["s3://lake"]
    before = (tmp_path / "state" / "controls.json").read_bytes()
    with pytest.raises(BadInputError, match=r"s3://nowhere: not paused in the fleet's state .* \(paused there: "
                                            r"s3://lake; a pause in the policy file"):
        controls.resume(state, "s3://nowhere", by="bob", reason="typo", now=301.0)
    assert (tmp_path / "state" / "controls.json").read_bytes() == before  # refused: nothing written
    log = state.read("controls.json")[0]["log"]
    assert [(e["action"], e["target"], e["by"]) for e in log] == [
        ("pause", "s3://lake", "alice"), ("pause", "s3://lake/t1", "bob"), ("resume", "s3://lake/t1", "bob")]
    with pytest.raises(BadInputError, match=r"paused.s3://lake/legacy/\*: expected \{by: who, reason: why\}"):
        policy_from({"paused": {"s3://lake/legacy/*": {"by": "ops"}}})


def test_the_run_log_keeps_failures_with_reasons_and_the_waits_of_a_gc(tmp_path):
    state = FleetState(str(tmp_path / "state"))

    def cycle(table: str, *jobs: tuple[str, str, str | None]) -> dict:
        return {"table": table, "jobs": [{"job": j, "status": s, "summary": "", "error": e, "exit_code": 1 if e else 0}
                                         for j, s, e in jobs]}

    record_results(state, [cycle("s3://l/a", ("merge", "failed", "merge: generation 3 unreadable"),
                                 ("gc", "not-run", None)),
                           cycle("s3://l/b", ("merge", "done", None), ("gc", "waiting", None))],
                   now=1000.0, retry_after=lambda table: 600.0)
    record_results(state, [cycle("s3://l/a", ("merge", "failed", "merge: lease lost"))], now=2000.0,
                   retry_after=lambda table: 600.0)
    doc = state.read("runs.json")[0]
    assert [f["error"] for f in failures_of(doc, "s3://l/a")] == ["merge: lease lost", "merge: generation 3 unreadable"]
    assert failures_of(doc, "s3://l/b") == []
    assert backoff_of(doc, 1500.0) == {"s3://l/b": {"gc": 1600.0}} and backoff_of(doc, 1700.0) == {}
    (tmp_path / "state" / "runs.json").write_text("{not json")
    assert state.read("runs.json")[0] == {}  # unreadable: taken as empty, never fatal


def test_the_histogram_counts_shards_by_pending_generations():
    h = histogram([0, 0, 1, 3, 8, 9, 2000])
    counts = dict(zip([*map(str, h["bounds"]), "inf"], h["counts"], strict=True))
    assert counts["0"] == 2 and counts["1"] == 1 and counts["4"] == 1 and counts["8"] == 1 and counts["16"] == 1
    assert counts["inf"] == 1 and sum(h["counts"]) == 7


def test_an_s3_notification_names_the_table_of_a_shard_manifest_and_nothing_else():
    from memwal.airflow.fleet_events import keys_of, table_of

    message = {"Body": json.dumps({"Records": [
        {"s3": {"bucket": {"name": "lake"}, "object": {"key": "tenants/acme/events/_mem_wal/0a1b/manifest/10.binpb"}}},
        {"s3": {"bucket": {"name": "lake"}, "object": {"key": "tenants/a+b/t/_mem_wal/0a1b/manifest/1.binpb"}}},
        {"s3": {"bucket": {"name": "lake"}, "object": {"key": "t/_mem_wal/0a1b/abcd_gen_3/data/x.lance"}}},
        {"s3": {"bucket": {"name": "lake"}, "object": {"key": "t/_mem_wal/_jobs/leases/merge.binpb"}}},
        {"s3": {"bucket": {"name": "lake"}, "object": {"key": "../x/_mem_wal/s/manifest/1.binpb"}}}]})}
    tables = {table_of(b, k) for b, k in keys_of(message)} - {None}
    assert tables == {"s3://lake/tenants/acme/events", "s3://lake/tenants/a b/t"}
    assert list(keys_of({"Body": json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent"})})) == []
    assert list(keys_of({"Body": "not json"})) == []


def test_the_status_shows_every_reason_the_last_run_whole_and_pauses_read_live():
    """What ``fleet status`` prints of a row: its pause once, every reason (the sixth and the
    service level too), and its last cycle whole; and what changed since the plan, read live:
    a pause made since moves the row and the counts, one lifted since moves them back."""
    from memwal.fleet.status import FleetStatus, live

    reasons = [f"reason {i}" for i in range(6)]
    reasons.append("slo: 12 generations listed in one shard (every reader opens them), target 8")
    row = {"table": "s3://l/t1", "source": "s3://l", "status": "behind", "debt": 3.0, "jobs": ["merge"],
           "reasons": reasons, "holds": {"unmerged_generations": 12}, "withheld": [], "paused": None}
    idle = {**row, "table": "s3://l/t2", "status": "paused", "reasons": ["paused by bob: old"], "withheld": ["gc"],
            "paused": {"target": "s3://l/t2", "by": "bob", "reason": "old", "at": 1.0, "origin": "state"}}
    brief = ["behind", 3.0, "s3://l", [], 12, None, "default", True, False, [[5, 1]], False]
    index = {"s3://l/t1": brief, "s3://l/t2": ["paused", *brief[1:]], "s3://l/t3": ["idle", 0.0, *brief[2:]]}
    report = {"format": 2, "at": 10.0, "discovered": 3, "by_status": {"behind": 1, "paused": 1}, "top": [row, idle],
              "index": index}
    runs = {"tables": {"s3://l/t1": {"at": 20.0, "last": [
        {"at": 20.0, "job": "merge", "status": "done", "summary": "v5: 3 generations"},
        {"at": 20.0, "job": "gc", "status": "waiting", "summary": "0 deleted, 6 blocked"}]}}}
    pause = {"target": "s3://l/t1", "by": "alice", "reason": "backfill", "at": 15.0}
    # as memwal fleet pause writes it (no fleet key set): the pause and its entry in the log
    controls_doc = {"pauses": [pause], "log": [{"action": "pause", **pause}]}
    st = FleetStatus(live(report, runs, controls_doc))
    text = st.render()
    assert all(r in text for r in reasons)  # none dropped after four
    assert text.count("backfill") == 1 and "paused by alice since" in text
    assert "last run 1970-01-01 00:00 UTC: waiting: merge done, gc waiting (0 deleted, 6 blocked)" in text
    doc = st.to_dict()
    # t1 paused since the plan, t2 resumed since: the counts and every breakdown from the same briefs
    assert {k: v for k, v in doc["by_state"].items() if v} == {"behind": 1, "paused": 1, "idle": 1}
    (source,) = doc["sources"]
    assert source["by_status"] == {**dict.fromkeys(source["by_status"], 0), "behind": 1, "paused": 1, "idle": 1}
    assert doc["histogram"]["counts"][5] == 3 and source["unmerged_generations"] == 36
    t1, t2 = doc["tables"]
    assert (t1["state"], t1["paused"]["by"], t1["last_run"]["outcome"]) == ("paused", "alice", "waiting")
    assert (t2["state"], t2["paused"], t2["reasons"][0]) == ("behind", None, "resumed since the last plan: "
                                                                             "its jobs run in the next round")


@pytest.mark.parametrize("junk", [5, "text", [1, 2], {"x": 1}, None, True, [{"job": None, "status": {"a": 1}}]])
def test_forged_run_log_and_controls_never_break_the_status_or_the_page(junk, tmp_path):
    """Whoever writes the state's folder writes ``runs.json`` and ``controls.json``: every field
    the live view reads may be of any type; the status and the page still render, escaped."""
    from memwal.fleet.page import write_fleet_page
    from memwal.fleet.status import FleetStatus, live

    row = {"table": "s3://l/t1", "source": "s3://l", "status": "paused", "debt": 1.0, "reasons": junk,
           "withheld": junk, "paused": junk, "last": junk, "gc": junk, "holds": junk, "waiting": {}}
    report = {"at": 1.0, "discovered": 1, "by_status": junk, "top": [row, junk], "unmatched": junk, "pauses": junk}
    runs = {"tables": {"s3://l/t1": {"at": junk, "last": junk, "gc": {"gates": junk, "at": junk, "frees": junk}}}}
    controls_doc = {"pauses": junk, "log": junk}
    st = FleetStatus(live(report, runs, controls_doc))
    assert "s3://l/t1" in st.render() and st.to_dict()["tables"][0]["table"] == "s3://l/t1"
    write_fleet_page(str(tmp_path / "page.html"), st, controls=controls_doc)
    assert "s3://l/t1" in (tmp_path / "page.html").read_text()


def test_the_state_pauses_that_match_no_table_are_looked_up_and_bounded():
    """``controls.json`` is storage: a plan names the state's pauses that match no table, the
    first ten, and counts the others; an exact target is looked up, a glob matched, a policy
    pause is the policy's own warning."""
    from memwal.fleet.shared import MAX_UNMATCHED_PAUSES, _unmatched
    from memwal.fleet.sources_model import Discovery, TableRef

    found = Discovery((TableRef("s3://l/t1", "s3://l", {}), TableRef("s3://l/t2", "s3://l", {})), (), ())
    gone = [Pause(f"s3://l/gone{i:02d}", "ops", "r") for i in range(MAX_UNMATCHED_PAUSES + 3)]
    held = [Pause("s3://l/t1", "ops", "r"), Pause("s3://l", "ops", "r"),
            Pause("s3://l/t*", "ops", "r")]
    policy = policy_from({"paused": {"s3://l/old": {"by": "ops", "reason": "r"}}})
    out = _unmatched(policy, Controls(policy.controls().pauses + tuple(held + gone)), found)
    assert out == ['policy paused."s3://l/old": matches no table of the fleet'] + [
        f"pause of s3://l/gone{i:02d} (memwal fleet pause, by ops): matches no table of the fleet"
        for i in range(MAX_UNMATCHED_PAUSES)] + ["3 more pauses match no table of the fleet"]
