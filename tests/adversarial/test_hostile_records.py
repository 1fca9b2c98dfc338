"""Run records and checkpoints from whoever can write the table's storage (issue 38).

A record is data, not trust: every free-text field is escaped wherever it lands (the page's
text, attributes, CSS classes, SVG; the terminal), a field of the wrong type or a record too
large is skipped with a warning naming it, a record dated far in the future stays off the top
and GC prunes it, and ``status --html`` never writes through a link planted beside its page.
The page is rendered in real Chromium next to a canary server that any script that ran, or
any resource that loaded, would call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import memwal
from memwal.history.log import RECORD_MAX_BYTES, read_runs
from memwal.inspect.page import collect, write_page
from memwal.table import open_table
from tests.browser import canary, dump_dom
from tests.helpers import run_cli
from tests.hostile import plant_hostile_checkpoint, plant_hostile_history, plant_record


def _good(job: str, started: float, **fields: object) -> dict:
    return {"job": job, "run_id": "ab12", "engine": "local", "holder": "h", "outcome": "ok", "started_at": started,
            "finished_at": started + 1, "versions": [1], "error": None, "figures": {}, "lag": {}, "detail": False,
            **fields}


def _scripts_and_handlers(dom) -> list[str]:
    found = []
    for e in dom.iter():
        if e.tag in ("script", "iframe", "object", "embed"):
            found.append(e.tag)
        found += [f"{e.tag}[{a}]" for a in e.attrs if a.lower().startswith("on")]
        if e.tag == "img" or (e.tag == "style" and "@import" in e.text):
            found.append(e.tag)
    return found


def test_hostile_strings_in_every_record_and_checkpoint_field_run_nothing_in_chromium(make_table, tmp_path):
    table, _ = make_table()
    assert memwal.open(table.uri).merge().ok
    page = tmp_path / "page.html"
    with canary() as c:
        now = time.time()
        skipped = plant_hostile_history(table.uri, c, now)
        plant_hostile_checkpoint(table.uri, c, now, table.dataset().version)
        run = run_cli("status", table.uri, "--html", str(page))
        assert run.rc == 0, run.stderr
        dom = dump_dom(page.as_uri(), budget_ms=3000)
        time.sleep(0.5)  # a request Chromium sent reaches the canary's thread
        assert c.hits == []
    assert _scripts_and_handlers(dom) == []
    assert run.stderr.count("skipping history record") == skipped, run.stderr
    text = dom.text
    assert text.count('<script>fetch("') >= 8  # shown as text: run id, engine, error, figures, checkpoint name
    (policy,) = [e.attrs["content"] for e in dom.iter() if e.attrs.get("http-equiv") == "Content-Security-Policy"]
    assert policy.startswith("default-src 'none'; script-src 'none'; style-src 'sha256-"), policy
    assert f"{skipped} unreadable history records skipped" in text


def test_history_shows_hostile_fields_as_text_never_terminal_escapes(make_table):
    table, _ = make_table()
    with canary() as c:
        plant_hostile_history(table.uri, c, time.time())
    run = run_cli("history", table.uri)
    assert run.rc == 0, run.stderr
    assert "\x1b" not in run.stdout and "\x07" not in run.stdout and "\x1b" not in run.stderr
    assert "\\x1b]0;PWNED\\x07" in run.stdout
    assert "2 unreadable records skipped" in run.stdout
    doc = json.loads(run_cli("history", table.uri, "--json").stdout)
    assert len(doc["skipped"]) == 2 and all("job" in s or "outcome" in s for s in doc["skipped"])


WRONG_TYPES = {
    "started_at yesterday": {"started_at": "yesterday"},
    "started_at null": {"started_at": None},
    "started_at 1e300": {"started_at": 1e300},
    "versions 7": {"versions": 7},
    "lag of text": {"lag": {"s": "xx"}},
    "lag row of text": {"lag": {"s": ["a", "b", "c"]}},
    "figures of text": {"figures": {"generations": "many"}},
    "figures a list": {"figures": [1, 2]},
    "GC's wait a list": {"figures": {"wait": [1, 2]}},
    "finished before started": {"finished_at": 1.0},
    "not an object": None,
}


@pytest.mark.parametrize("case", list(WRONG_TYPES))
def test_a_record_of_the_wrong_type_is_skipped_with_a_warning_and_the_views_go_on(make_table, tmp_path, case):
    table, _ = make_table()
    now = time.time()
    plant_record(table.uri, "merge", now - 100, _good("merge", now - 100))
    bad = WRONG_TYPES[case]
    record = [1, 2, 3] if bad is None else _good("gc", now - 50, **bad)
    path = plant_record(table.uri, "gc", now - 50, record)
    run = run_cli("history", table.uri, "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    assert [r["job"] for r in doc["runs"] if r["job"] != "external"] == ["merge"]
    assert len(doc["skipped"]) == 1 and str(path) in doc["skipped"][0], doc["skipped"]
    assert f"skipping history record {path}" in run.stderr
    page = tmp_path / "p.html"
    run = run_cli("status", table.uri, "--html", str(page))
    assert run.rc == 0, run.stderr
    assert "1 unreadable history record skipped" in page.read_text()


def test_a_record_too_large_is_never_loaded(make_table, tmp_path):
    table, _ = make_table()
    now = time.time()
    big = _good("merge", now - 10, error="x" * (100 * 1024 * 1024))
    path = plant_record(table.uri, "merge", now - 10, big)
    assert path.stat().st_size > 100 * 1024 * 1024
    page = tmp_path / "p.html"
    # the peak resident set of this process alone (ru_maxrss would carry the forking test's across exec)
    probe = ("import sys\nfrom memwal.cli import main\nrc = main(sys.argv[1:])\n"
             "print([ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM')][0], file=sys.stderr)"
             "\nsys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", probe, "status", table.uri, "--html", str(page)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"more than the {RECORD_MAX_BYTES:,}" in proc.stderr and str(path) in proc.stderr
    peak_kib = int(proc.stderr.strip().splitlines()[-1])
    assert peak_kib < 400 * 1024, peak_kib  # the record alone is 100 MiB; parsed and rendered, 600 MiB
    assert page.stat().st_size < 1024 * 1024
    run = run_cli("history", table.uri, "--json")
    assert run.rc == 0 and json.loads(run.stdout)["skipped"], run.stderr


def test_a_record_dated_in_the_future_stays_off_the_top_and_gc_prunes_it(make_table):
    table, _ = make_table()
    t = memwal.open(table.uri)
    assert t.merge().ok
    future = plant_record(table.uri, "merge", time.time() + 10 * 365 * 86400,
                          _good("merge", time.time() + 10 * 365 * 86400))
    runs = t.history(limit=1).runs
    assert runs and runs[0]["started_at"] < time.time() + 60, runs  # the real merge is on top
    gc = t.gc(dry_run=True).to_dict()
    assert gc["history_pruned"] == 1
    assert t.gc().ok
    assert not future.exists()
    assert [r.job for r in read_runs(open_table(table.uri).store)].count("merge") == 1


def test_status_html_never_writes_through_a_link_planted_at_a_temporary_name(make_table, tmp_path):
    table, _ = make_table()
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    folder = tmp_path / "pages"
    folder.mkdir()
    # the names the page's temporary file took: predictable from the pid
    for pid in (os.getpid(), os.getpid() + 1):
        os.symlink(outside, folder / f".page.html.{pid}.tmp")
    write_page(str(folder / "page.html"), collect(open_table(table.uri)))
    assert outside.read_text() == "precious"
    assert (folder / "page.html").read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in folder.iterdir() if not p.is_symlink()) == ["page.html"]
    assert oct(Path(folder / "page.html").stat().st_mode & 0o777) == "0o644"
