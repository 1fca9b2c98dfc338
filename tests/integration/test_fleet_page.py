"""The page an operator keeps open, at 1,000 tables, in Chromium.

A fleet of 1,000 tables in five sources (``bench/data/fleet.py``: behind, past a service level,
waiting for GC's grace period and version expiry, idle), a source and a table paused with who
and why, a table whose merge failed; two plans with the state in a folder; then the page of
the last plan (``memwal fleet status --state DIR --html``, no source: it plans nothing).
What a person sees: counts by status that add up to the fleet, ``waiting`` apart from
``behind``, reasons written out in each row (no tooltip), the top tables told apart by what
they hold, a row per source, the breaches, the pending-generations histogram, the trends,
the pauses and the failure with its reason; no script. Screenshots are kept beside the page.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memwal.core import clock as clocks
from memwal.fleet import control_log as controls
from memwal.fleet.state import FleetState
from tests.browser import canary, dump_dom, screenshot
from tests.helpers import run_cli

TABLES = 1000


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> dict:
    from bench.data.fleet import build_demo_fleet

    root = tmp_path_factory.mktemp("fleet-page")
    sources = build_demo_fleet(root / "lake", tables=TABLES, shards=1)
    return {"root": root, "sources": sources}


def test_the_page_at_1000_tables_tells_an_operator_what_each_table_holds_and_why(demo, tmp_path):
    from memwal.fleet.run import run_fleet
    from memwal.fleet.runs import record_results

    sources = demo["sources"]
    state = FleetState(str(tmp_path / "state"))
    now = clocks.current()()
    controls.pause(state, sources[4], by="ops", reason="tenant 4 migrates", now=now)
    controls.pause(state, f"{sources[0]}/backlog-0000", by="alice", reason="a bad partition", now=now)
    broken = Path(sources[1], "backlog-0001", "_mem_wal")
    shard = next(p for p in broken.iterdir() if not p.name.startswith("_"))
    next(p for p in shard.iterdir() if "_gen_" in p.name).rename(shard / "moved-away")
    failed = run_fleet([str(broken.parent)], max_rounds=1)
    record_results(state, failed.results, now=now, retry_after=lambda t: 600.0)
    for _ in range(2):
        run = run_cli("fleet", "plan", *sources, "--state", state.uri, "--json")
        assert run.rc == 0, run.stderr
    page = tmp_path / "fleet.html"
    with canary():
        run = run_cli("fleet", "status", "--state", state.uri, "--html", str(page), "--json")
        assert run.rc == 0, run.stderr
        dom = dump_dom(page.as_uri(), budget_ms=4000, window="1400,2200")
    doc = json.loads(run.stdout)
    kpis = {k.attrs["data-state"]: int(k.one("div.value").text) for k in dom.select("div.kpi[data-state]")}
    assert sum(kpis.values()) == TABLES == doc["discovered"]
    assert kpis["paused"] == TABLES // 5 + 1 and kpis["waiting"] > 0 and kpis["behind"] > 0 and kpis["idle"] > 0
    rows = dom.select("tr.table-row")
    assert len(rows) == 50
    # reasons inline: every row with work says why, in words, in the row itself
    for row in rows:
        reasons = [li.text for li in row.select("ul.reasons li")]
        assert reasons and "title" not in row.attrs
    # the top tables are told apart by what they hold (rank ties broken by age and bytes)
    holds = [" ".join(td.text for td in row.select("td.holds")) for row in rows[:10]]
    assert all(h.strip() for h in holds)
    assert len(dom.select("tr.source-row")) == 5
    assert len(dom.select("tr.breach-row")) > 0 and dom.select("svg#pending-histogram")
    assert dom.select("svg#trend-debt") and dom.select("svg#trend-lag")
    titles = [f.one("figcaption b").text for f in dom.select("figure.trend")]
    assert titles == ["Debt", "Lag", "Tables behind"]  # each chart says what it draws
    pauses = {r.select("td")[0].text: r.select("td")[1].text for r in dom.select("tr.pause-row")}
    assert pauses == {sources[4]: "ops", f"{sources[0]}/backlog-0000": "alice"}
    failures = [r.text for r in dom.select("tr.failure-row")]
    assert len(failures) == 1 and "backlog-0001" in failures[0] and "merge" in failures[0]
    assert not dom.select("script")
    for name, window in (("fleet-page.png", "1400,2200"), ("fleet-page-tables.png", "1400,9000")):
        screenshot(page.as_uri(), str(tmp_path / name), window=window)
        assert (tmp_path / name).stat().st_size > 20_000
