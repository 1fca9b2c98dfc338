"""Control and bidirectional characters stored by whoever writes the storage never reach a page
raw (issue 61, 5): ESC, BEL and U+202E planted in the fleet's state (a pause's reason, a
control log entry, a table's last failure, a table's name in the report) and in a table's run
history are shown as visible escapes on the fleet page and the table page, and so in the
SVG charts' titles; the markup around them is ours."""

from __future__ import annotations

import json
import time
from pathlib import Path

import memwal
from tests.helpers import run_cli
from tests.hostile import plant_record

EVIL = "a\x1b]52;c;ZWNobw==\x07b\u202egnp.exe\u2066c"
RAW = ("\x1b", "\x07", "\u202e", "\u2066")
SHOWN = ("\\x1b", "\\x07", "\\u202e", "\\u2066")


def assert_escaped(html: str) -> None:
    assert not any(ch in html for ch in RAW), [ch for ch in RAW if ch in html]
    assert all(s in html for s in SHOWN), [s for s in SHOWN if s not in html]


def test_the_fleet_page_shows_stored_control_and_bidi_characters_as_escapes(make_table, tmp_path, monkeypatch):
    monkeypatch.delenv("MEMWAL_FLEET_KEY", raising=False)
    table, _ = make_table()
    state = tmp_path / "state"
    assert run_cli("fleet", "plan", table.uri, "--state", str(state), "--json").rc == 0
    assert run_cli("fleet", "pause", table.uri, "--state", str(state), "--by", f"ops{EVIL}", "--reason", EVIL).rc == 0
    plan = json.loads((state / "plan.json").read_text())
    plan["report"]["top"][0]["reasons"].append(EVIL)
    plan["report"]["problems"] = [{"table": f"/x/{EVIL}", "error": EVIL}]
    (state / "plan.json").write_text(json.dumps(plan))
    (state / "runs.json").write_text(json.dumps({"format": 1, "tables": {table.uri: {
        "at": time.time(), "last": [{"job": "merge", "status": "failed", "summary": EVIL, "error": EVIL}],
        "failures": [{"at": time.time(), "job": "merge", "error": EVIL}]}}}))
    page = tmp_path / "fleet.html"
    run = run_cli("fleet", "status", "--state", str(state), "--html", str(page))
    assert run.rc == 1 and "\\u202egnp" in run.stderr, run.stderr  # the problem, named on one escaped line
    html = page.read_text()
    assert_escaped(html)
    assert html.count("gnp.exe") >= 4  # the pause, its log entry, the reason, the failure: shown, as text


def test_the_table_page_and_its_charts_show_stored_control_and_bidi_characters_as_escapes(make_table, tmp_path):
    table, _ = make_table()
    assert memwal.open(table.uri).merge().ok
    now = time.time()
    plant_record(table.uri, "merge", now - 60, {
        "job": "merge", "run_id": "ab12", "engine": "local", "holder": EVIL, "outcome": "failed",
        "started_at": now - 60, "finished_at": now - 59, "versions": [], "error": EVIL, "figures": {},
        "lag": {EVIL: [1, 2, 3.5]}, "detail": False})
    page = tmp_path / "table.html"
    run = run_cli("status", table.uri, "--html", str(page))
    assert run.rc == 0, run.stderr
    html = Path(page).read_text()
    assert_escaped(html)
