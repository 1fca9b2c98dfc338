"""A fleet no one object can stop (issue 56): the fleet's shared state, poisoned by whoever
can write it.

Each case plants what the issue's attacker planted in the state folder (``plan.json``,
``runs.json``, ``controls.json``, ``cache.json``): 200,000 nested ``[``, entries of the wrong
type, numbers no float holds, a cache of small objects, 60,000 pause globs, a forged ``*``
pause, forged figures in the last report. Then the fleet plans and runs for real (the CLI on
tables pylance's ShardWriter wrote): every table is still maintained (its runs recorded, its
rows the demo model's), the page and the status text still render, and what was forged is
named as such. A canary folder outside every table must not change."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from memwal.demo import Workload, create_base_table, write_generations
from memwal.table import open_table
from tests.conftest import table_rows
from tests.helpers import memwal_program, run_cli, run_watched

TINY = Workload(base_rows=40, shards=1, generations=2, rows_per_generation=10, seed=9, indexes=False)
NESTED = "[" * 200_000


def lake(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    root = tmp_path / "lake"
    models = {}
    for name in ("t1", "t2"):
        path = root / name
        _, model = create_base_table(str(path), TINY)
        models[str(path)] = write_generations(str(path), TINY, model)
    return root, models


def runs_of(state: Path) -> dict:
    return json.loads((state / "runs.json").read_text())["tables"]


def status_of(uri: str) -> dict:
    run = run_cli("status", uri, "--json")
    assert run.rc == 0, run.stderr
    return json.loads(run.stdout)


def plant(state: Path, objects: dict[str, str]) -> None:
    state.mkdir(parents=True, exist_ok=True)
    for name, text in objects.items():
        (state / name).write_text(text)


def doc(**entries: object) -> str:
    return json.dumps({"format": 1, **entries})


POISONS = {
    "nested": lambda t1: {name: NESTED for name in ("plan.json", "runs.json", "controls.json", "cache.json")},
    "wrong-types": lambda t1: {"plan.json": doc(history=5, report=[1]), "runs.json": doc(tables=[1, 2]),
                               "controls.json": doc(pauses=5, log="x"),
                               "cache.json": json.dumps({"format": 2, "manifests": [1], "facts": 5})},
    # L6: one table's entry with waiting: [1]; the other entries and fields of every wrong type
    "wrong-entries": lambda t1: {
        "runs.json": doc(tables={t1: {"waiting": [1], "failures": 5, "last": {"job": "merge"}, "at": "now"},
                                 "s3://x/y": [1, 2], "s3://x/z": {"waiting": {"gc": "soon"}, "failures": [1, None]}}),
        "plan.json": doc(history=[5, {"at": "x"}, {"at": 1.0, "debt": [1]}], report={"format": 1, "top": 5}),
        "controls.json": doc(pauses=[1, {"target": 5}, {"target": ["*"]}], log=[5]),
        "cache.json": json.dumps({"format": 2, "manifests": {t1: {"tag": 5}}, "facts": {t1: [1]}})},
    "huge-numbers": lambda t1: {
        "runs.json": '{"format": 1, "tables": {"T1": {"waiting": {"gc": BIG}, "at": 1e400}}}'.replace(
            "T1", t1).replace("BIG", "1" + "0" * 400),
        "plan.json": '{"format": 1, "history": [{"at": 1e400, "debt": NaN}, {"at": Infinity}, {"at": 1, '
                     '"debt": -Infinity}], "report": {"format": 1, "at": NaN, "debt": Infinity}}',
        "controls.json": '{"format": 1, "pauses": [{"target": "x", "at": 1e400}], "log": [{"at": NaN}]}'},
}


@pytest.mark.parametrize("case", sorted(POISONS))
def test_a_poisoned_state_object_never_stops_the_fleet(canary, tmp_path, case):
    root, models = lake(tmp_path)
    state = tmp_path / "state"
    t1 = str(root / "t1")
    plant(state, POISONS[case](t1))
    run = run_cli("fleet", "plan", str(root), "--state", str(state), "--json")
    assert run.rc == 0, run.stderr
    assert {t["table"]: t["jobs"][:1] for t in json.loads(run.stdout)["tables"]} == {u: ["merge"] for u in models}
    run = run_cli("fleet", "run", str(root), "--state", str(state), "--json", "--max-rounds", "1")
    assert run.rc == 0, run.stderr
    assert "Traceback" not in run.stderr
    first = {r["table"]: [(j["job"], j["status"]) for j in r["jobs"]] for r in json.loads(run.stdout)["runs"]
             if r["round"] == 1}
    assert sorted(first) == sorted(models) and all(("merge", "done") in jobs for jobs in first.values()), first
    recorded = runs_of(state)
    for uri, model in models.items():  # every table merged, and its results recorded (L6)
        assert table_rows(open_table(uri)) == model.sorted_rows()
        assert status_of(uri)["shards"][0]["compacted_generation"] == TINY.generations
        assert recorded[uri]["last"] and isinstance(recorded[uri]["at"], float), recorded[uri]
    for name in ("plan.json", "runs.json"):  # rewritten whole by the run, of our shape
        text = (state / name).read_text()
        assert "NaN" not in text and "Infinity" not in text and len(text) < 1_000_000, (name, text[:200])
    status = run_cli("fleet", "status", "--state", str(state), "--html", str(tmp_path / "fleet.html"))
    assert status.rc == 0, status.stderr
    assert "2 tables" in status.stdout and (tmp_path / "fleet.html").stat().st_size > 0


def test_a_cache_of_small_objects_is_refused_by_its_values_before_it_is_parsed(canary, tmp_path):
    """200 MB of small objects under the byte cap took plan and run past 2.5 GB: a cache with
    more values than the cap is refused unparsed; one just under it parses within bounds."""
    from memwal.fleet.cache import MAX_CACHE_VALUES

    root, models = lake(tmp_path)
    cache = tmp_path / "cache.json"
    for name, objects, refused in (("over the cap", MAX_CACHE_VALUES // 2 + 10, True),
                                   ("just under the cap", MAX_CACHE_VALUES // 2 - 10, False)):
        cache.write_bytes(b'{"format": 2, "manifests": {}, "facts": {}, "junk": [' + b",".join([b"{}"] * objects)
                          + b"]}")
        run = run_watched([memwal_program(), "fleet", "plan", str(root), "--cache", str(cache), "--json"])
        print(f"cache of {objects:,} small objects ({name}): exit {run.rc}, {run.peak_mb:.0f} MB, {run.seconds:.1f} s",
              file=sys.stderr)
        assert run.rc == 0, run.stderr
        assert sorted(t["table"] for t in json.loads(run.stdout)["tables"]) == sorted(models)
        assert ("ignoring the fleet cache" in run.stderr and "values" in run.stderr) == refused, run.stderr
        assert run.peak_mb < 600, run.peak_mb


def logged_pauses(targets: list[str], at: float, *, logged: bool = True) -> str:
    """controls.json with pauses of ``targets`` (and their log entries, as a forger who read the
    format writes them), compact."""
    pauses = [{"target": t, "by": "o", "reason": "r", "at": at} for t in targets]
    log = [{"action": "pause", **p} for p in pauses] if logged else []
    return json.dumps({"format": 1, "pauses": pauses, "log": log}, separators=(",", ":"))


def test_pause_globs_are_bounded_and_a_table_costs_lookups_not_sixty_thousand_matches(canary, tmp_path):
    from memwal.fleet.controls import MAX_GLOB_PAUSES

    root, models = lake(tmp_path)
    t1, t2 = str(root / "t1"), str(root / "t2")
    state = tmp_path / "state"
    # the case: 60,000 non-matching globs (3.7 MB): not logged, so not one memwal wrote
    plant(state, {"controls.json": logged_pauses([f"s3://no/{i:05d}/*" for i in range(60_000)], 1, logged=False)})
    run = run_watched([memwal_program(), "fleet", "plan", str(root), "--state", str(state), "--json"])
    print(f"60,000 pause globs: exit {run.rc}, {run.peak_mb:.0f} MB, {run.seconds:.1f} s", file=sys.stderr)
    assert run.rc == 0, run.stderr
    assert {t["table"]: t["status"] for t in json.loads(run.stdout)["tables"]} == {t1: "behind", t2: "behind"}
    assert "59990 more pauses not honoured" in run.stderr
    # logged ones, as many as controls.json holds: the first MAX_GLOB_PAUSES are matched, no more
    globs = [f"s3://n/{i:05d}/*" for i in range(30_000)]
    globs[MAX_GLOB_PAUSES - 1] = f"{root}/t1*"  # within the bound: matched
    globs.append(f"{root}/t2*")  # past it: not matched
    plant(state, {"controls.json": logged_pauses(globs, 1)})
    run = run_watched([memwal_program(), "fleet", "plan", str(root), "--state", str(state), "--json"])
    print(f"30,000 logged pause globs: exit {run.rc}, {run.peak_mb:.0f} MB, {run.seconds:.1f} s", file=sys.stderr)
    assert run.rc == 0, run.stderr
    assert {t["table"]: t["status"] for t in json.loads(run.stdout)["tables"]} == {t1: "paused", t2: "behind"}
    assert f"the first {MAX_GLOB_PAUSES} are matched, the others ignored" in run.stderr
    assert run.seconds < 60  # a bound, not a benchmark: 7 s a table before
    # one more glob (of the fleet's tables: a glob that matches nothing is refused before it is counted)
    refused = run_cli("fleet", "pause", f"{root}/t*", "--state", str(state), "--by", "ops", "--reason", "r", "--yes")
    assert refused.rc == 2 and f"{MAX_GLOB_PAUSES} glob pauses already" in refused.stderr


def test_a_forged_pause_is_shown_as_forged_and_withholds_nothing(canary, tmp_path, monkeypatch):
    root, models = lake(tmp_path)
    t1, t2 = str(root / "t1"), str(root / "t2")
    state = tmp_path / "state"
    now = time.time() - 60
    # without the fleet's key: a pause the control log does not hold is not one memwal wrote
    plant(state, {"controls.json": doc(pauses=[{"target": "*", "by": "ops", "reason": "maintenance", "at": now}],
                                       log=[])})
    run = run_cli("fleet", "run", str(root), "--state", str(state), "--json", "--max-rounds", "1")
    assert run.rc == 0, run.stderr
    assert "the pause of * is not honoured: no entry in the control log" in run.stderr
    for uri, model in models.items():
        assert table_rows(open_table(uri)) == model.sorted_rows()
        assert status_of(uri)["shards"][0]["compacted_generation"] == TINY.generations  # merged, not paused
    report = json.loads((state / "plan.json").read_text())["report"]
    assert [(p["target"], p["forged"] is not None) for p in report["pauses"]] == [("*", True)]
    page = tmp_path / "fleet.html"
    assert run_cli("fleet", "status", "--state", str(state), "--html", str(page)).rc == 0
    assert "forged: not honoured" in page.read_text()

    # with the key: the CLI's pause is signed and honoured; a forged one, logged too, is not
    monkeypatch.setenv("MEMWAL_FLEET_KEY", "k" * 32)
    (state / "controls.json").unlink()
    assert run_cli("fleet", "pause", t1, "--state", str(state), "--by", "alice", "--reason", "migration").rc == 0
    controls = json.loads((state / "controls.json").read_text())
    controls["pauses"].append({"target": "*", "by": "alice", "reason": "migration", "at": now})
    controls["log"].append({"action": "pause", "target": "*", "by": "alice", "reason": "migration", "at": now})
    (state / "controls.json").write_text(json.dumps(controls))
    write_generations(t2, TINY, models[t2])  # more work for the table the forged pause would hold
    run = run_cli("fleet", "plan", str(root), "--state", str(state), "--json")
    assert run.rc == 0, run.stderr
    tables = {t["table"]: t for t in json.loads(run.stdout)["tables"]}
    assert tables[t1]["status"] == "paused" and tables[t1]["paused"]["by"] == "alice"
    assert tables[t2]["status"] == "behind" and tables[t2]["paused"] is None
    assert "the pause of * is not honoured: not signed with the fleet's key" in run.stderr
    assert run_cli("fleet", "status", "--state", str(state), "--html", str(page)).rc == 0
    text = page.read_text()
    assert text.count("forged: not honoured") == 1 and text.count(">forged</span>") == 1  # the pause and its log entry
    assert "k" * 32 not in text and "k" * 32 not in run.stderr + run.stdout


FORGED_REPORT = ('{"format": 1, "history": [POINTS], "report": {"format": 2, "at": 1e400, "discovered": Infinity, '
                 '"debt": NaN, "by_status": [1], "skipped": "x", "breaches": {"count": [1, 2], "tables": Infinity, '
                 '"named": 5}, "histogram": {"bounds": 5, "counts": [1]}, "sources": 5, "groups": [5], '
                 '"pauses": {"a": 1}, "failures": 5, "problems": [5, {"table": 5}], "top": [{"table": "/t", '
                 '"debt": Infinity, "jobs": 5, "reasons": 5, "breaches": {"x": 1}, "holds": [1], "last": 5, '
                 '"waiting": [1], "paused": 5, "last_failure": [1]}, 5], "shares": {"a": "x"}, "index": {"/t": '
                 '["idle", Infinity, 5, [], -1, NaN, "g", 1, 0, [[99, 1]], 0], "/u": [1, 2]}}}')


def test_forged_figures_in_the_last_report_never_stop_status_the_page_or_later_plans(canary, tmp_path, monkeypatch):
    root, models = lake(tmp_path)
    state = tmp_path / "state"
    points = ", ".join('{"at": ' + str(1_700_000_000 + i) + ', "debt": Infinity, "behind": NaN}' for i in range(3))
    plant(state, {"plan.json": FORGED_REPORT.replace("POINTS", points)})
    page = tmp_path / "fleet.html"
    for argv in ([], ["--html", str(page)], ["--json"]):
        run = run_cli("fleet", "status", "--state", str(state), *argv)
        assert run.rc == 0 and "Traceback" not in run.stderr, run.stderr
    assert page.stat().st_size > 0
    # a later plan keeps the history's points, their forged figures gone (they outlived 2,016 plans)
    assert run_cli("fleet", "plan", str(root), "--state", str(state)).rc == 0
    history = json.loads((state / "plan.json").read_text())["history"]
    assert len(history) == 4 and [p["debt"] for p in history[:3]] == [None] * 3 and history[3]["debt"] > 0
    # the Airflow fleet view draws it (the page the API server streams)
    config = tmp_path / "fleet.yaml"
    config.write_text(json.dumps({"sources": [str(root)], "state": str(state)}))
    monkeypatch.setenv("MEMWAL_FLEET_CONFIG", str(config))
    plant(state, {"plan.json": FORGED_REPORT.replace("POINTS", points)})
    from memwal.airflow.fleet_view import fleet_page

    html = "".join(fleet_page())
    assert "MemWAL fleet" in html and "/t" in html


def test_a_row_waiting_on_fifty_thousand_jobs_shows_one_a_job(canary, tmp_path):
    """A planted report whose row says it waits on 50,000 'jobs': the page names at most one
    entry a job kind (five), not a page of 50,000."""
    state = tmp_path / "state"
    waiting = {f"job{i}": {"until": 1_700_000_000, "why": "x"} for i in range(50_000)}
    row = {"table": "/t", "status": "waiting", "debt": 1, "waiting": waiting}
    plant(state, {"plan.json": json.dumps({"format": 1, "history": [], "report": {
        "format": 2, "at": 1_700_000_000, "discovered": 1, "by_status": {"waiting": 1}, "top": [row]}})})
    page = tmp_path / "fleet.html"
    run = run_cli("fleet", "status", "--state", str(state), "--html", str(page))
    assert run.rc == 0, run.stderr
    text = page.read_text()
    assert "job4: next" in text and "job5: next" not in text and len(text) < 200_000


#: What a value read from the state may be, once read (non-finite and huge numbers read as None).
STORED = [None, True, 5, -1, 10**18, 1.5e18, "x", [1], [], {"a": 1}, {}, [[1]], [{"a": [1]}]]


def test_any_field_of_a_stored_report_forged_any_way_leaves_status_the_page_and_patches_standing(canary, tmp_path):
    """Every field of a real report (a paused table, a breach, a failure, a pause in the state),
    replaced by each kind of value a stored document can hold: the status text, its document,
    the page and an event run's patch of the report all still come out."""
    from memwal.fleet import control_log as controls
    from memwal.fleet.page import fleet_page_chunks
    from memwal.fleet.report import REPORT_FORMAT, last_report, patch_report
    from memwal.fleet.runs import record_results
    from memwal.fleet.state import FleetState
    from memwal.fleet.status import FleetStatus

    root, models = lake(tmp_path)
    t1, t2 = str(root / "t1"), str(root / "t2")
    state = FleetState(str(tmp_path / "state"))
    controls.pause(state, t1, by="ops", reason="r", now=time.time())
    record_results(state, [{"table": t2, "jobs": [{"job": "merge", "status": "failed", "error": "e", "exit_code": 1},
                                                   {"job": "gc", "status": "waiting"}]}], now=time.time(),
                   retry_after=lambda table: 600.0)
    policy = tmp_path / "policy.yaml"
    policy.write_text(json.dumps({"defaults": {"slo": {"generations_per_shard": 1}}}))
    assert run_cli("fleet", "plan", str(root), "--state", state.uri, "--policy", str(policy)).rc == 0
    report, history = last_report(state)
    assert report is not None and report["pauses"] and report["failures"] and report["breaches"]["named"]

    def paths(value: object, at: tuple = ()) -> list[tuple]:
        out = [at] if at else []
        items = value.items() if isinstance(value, dict) else enumerate(value[:2]) if isinstance(value, list) else ()
        for k, v in items:
            out += paths(v, (*at, k))
        return out

    for path in paths(report):
        for value in STORED:
            forged = json.loads(json.dumps(report))
            here = forged
            for k in path[:-1]:
                here = here[k]
            here[path[-1]] = value
            st = FleetStatus(forged, tuple(history))
            assert st.render() and json.dumps(st.to_dict())
            assert "MemWAL fleet" in "".join(fleet_page_chunks(st, controls=state.read("controls.json")[0]))
            assert patch_report(forged, json.loads(json.dumps(report)), top=50)["format"] == REPORT_FORMAT


def test_the_airflow_table_page_opens_only_a_table_under_a_configured_sources_roots(canary, tmp_path, monkeypatch):
    """A forged report row naming a configured source and a table elsewhere rendered that
    table's page with the source's storage options (issue 56, M4): the URI is checked against
    the source's roots every time, whatever the row says."""
    from memwal.airflow.fleet_view import fleet_table

    root, models = lake(tmp_path)
    victim = tmp_path / "victim"
    create_base_table(str(victim), TINY)
    state = tmp_path / "state"
    config = tmp_path / "fleet.yaml"
    config.write_text(json.dumps({"sources": [{"source": str(root), "storage_options": {"allow_http": "true"}}],
                                  "state": str(state)}))
    monkeypatch.setenv("MEMWAL_FLEET_CONFIG", str(config))
    assert run_cli("fleet", "plan", str(root), "--state", str(state)).rc == 0
    plan = json.loads((state / "plan.json").read_text())
    row = plan["report"]["top"][0]
    for forged in (str(victim), f"{root}/../victim", f"{root}-sibling/t", f"file://{victim}"):
        plan["report"]["top"].append({**row, "table": forged, "source": str(root)})
        plan["report"]["problems"].append({"table": forged, "error": "x"})
    (state / "plan.json").write_text(json.dumps(plan))
    assert fleet_table(str(root / "t1")) == (str(root / "t1"), {"allow_http": "true"})
    for forged in (str(victim), f"{root}/../victim", f"{root}-sibling/t", f"file://{victim}"):
        with pytest.raises(LookupError, match="no source of the fleet holds"):
            fleet_table(forged)
