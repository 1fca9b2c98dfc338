"""A plan reads ``plan.json`` once (issue 64's request budget) and saves its report over that
read by compare-and-swap: a save from a stale read loses the race and is redone from a fresh
read, so a concurrent plan's history point is never lost."""

from __future__ import annotations

from typing import Any

from memwal.fleet.plan import STATUSES
from memwal.fleet.report import REPORT_FORMAT, last_report, save_report
from memwal.fleet.state import PLAN, FleetState


def _report(at: float) -> dict[str, Any]:
    return {"format": REPORT_FORMAT, "at": at, "discovered": 1, "debt": 0.0, "by_status": {s: 0 for s in STATUSES},
            "breaches": {"tables": 0}, "oldest_unmerged_age_seconds": 0.0, "unmerged_generations": 0, "requests": 3}


def test_a_save_over_a_stale_read_is_redone_and_keeps_the_other_plans_point(tmp_path):
    state = FleetState(str(tmp_path / "state"))
    save_report(state, _report(1.0))
    read_by_a = state.read(PLAN)  # plan A reads plan.json, then plans
    read_by_b = state.read(PLAN)  # plan B too
    save_report(state, _report(2.0), read=read_by_b)  # B saves first
    save_report(state, _report(3.0), read=read_by_a)  # A's read is stale: its swap fails, redone
    report, history = last_report(state)
    assert report is not None and report["at"] == 3.0
    assert [p["at"] for p in history] == [1.0, 2.0, 3.0]


def test_a_save_over_a_fresh_read_reads_nothing_again(tmp_path):
    state = FleetState(str(tmp_path / "state"))
    save_report(state, _report(1.0))
    read = state.read(PLAN)
    gets = []
    original = state.read
    state.read = lambda name: gets.append(name) or original(name)  # type: ignore[method-assign]
    save_report(state, _report(2.0), read=read)
    assert gets == []  # the plan's own read served the swap
    assert [p["at"] for p in last_report(state)[1]] == [1.0, 2.0]
