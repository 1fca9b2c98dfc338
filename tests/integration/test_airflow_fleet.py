"""The ``memwal_fleet`` DAG on real Airflow and real tables written by pylance's ShardWriter.

``airflow dags test memwal_fleet`` draining a nested lake to its writers' rows, then an idle run
that changes nothing; the DAG file parsed with 10 and with 1,000 tables behind its source
without listing it; one bad config key as one import error; two task instances of one table at
once (step hooks, no sleeps) committing once; each table's lag on Airflow's StatsD under a name
of its own; a chunk as one spark-submit; and the fleet page inside Airflow's UI (a real
api-server, Chromium) with table names that carry markup.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from airflow.sdk import AssetAlias
from airflow.sdk.execution_time.context import OutletEventAccessors
from memwal.airflow.assets import table_asset

import memwal
from memwal.core import steps
from memwal.demo import Workload, create_base_table, write_generations
from memwal.history.log import read_runs
from memwal.table import open_table
from tests.airflow_server import api_server, get_with_headers
from tests.browser import browser, canary
from tests.conftest import table_rows
from tests.helpers import ROOT, migrated_airflow_home, run_cli, tree_digest
from tests.integration.test_airflow_observe import StatsdListener, metric

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)

DAGS = ROOT / "dags"
VENV_BIN = Path(sys.executable).parent
WL = Workload(base_rows=300, shards=2, generations=3, rows_per_generation=20, seed=7)
SECRET = "memwal-fleet-secret-0123456789"


def make(path: Path, wl: Workload = WL):
    path.parent.mkdir(parents=True, exist_ok=True)
    _, model = create_base_table(str(path), wl)
    write_generations(str(path), wl, model)
    return model


def write_config(path: Path, lake: Path, extra: str = "") -> Path:
    path.write_text(f"sources: [{json.dumps(str(lake))}]\nschedule: null\nstate: fleet-state\n"
                    "budget: {tables_per_task: 2, threads: 2}\n" + extra)
    return path


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory):
    return migrated_airflow_home(tmp_path_factory.mktemp("airflow-fleet"))


def airflow_cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "airflow"), *args], env=env, capture_output=True, text=True, timeout=600)


def fake_ti():
    class TI:
        dag_id = "memwal_fleet"

        def __init__(self) -> None:
            self.xcom: dict[str, object] = {}

        def xcom_push(self, key: str, value: object) -> None:
            self.xcom[key] = value

    return TI()


def context() -> dict:
    return {"ti": fake_ti(), "outlet_events": OutletEventAccessors(), "params": {}}


# -- the DAG on real Airflow ------------------------------------------------------------------------
def test_dags_test_drains_the_fleet_to_its_writers_rows_and_an_idle_rerun_commits_nothing(airflow_env, tmp_path):
    lake = tmp_path / "lake"
    models = {str(lake / "a" / "events"): make(lake / "a" / "events"),
              str(lake / "b" / "deep" / "events"): make(lake / "b" / "deep" / "events"),
              str(lake / "t3"): make(lake / "t3")}
    (lake / "stray").mkdir()
    # compaction is not this test's subject: the merge's deletions alone would ask for one next run
    no_compaction = "policy: {defaults: {thresholds: {compact_deleted_fraction: 1}}}\n"
    config = write_config(tmp_path / "fleet.yaml", lake, no_compaction)
    env = {**airflow_env, "MEMWAL_FLEET_CONFIG": str(config)}
    proc = airflow_cli(env, "dags", "test", "memwal_fleet")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "state=success" in out, out[-4000:]
    for uri, model in models.items():
        assert table_rows(open_table(uri)) == model.sorted_rows()
        assert memwal.open(uri).status().unmerged_generations == 0
        assert memwal.open(uri).verify().ok
    home = Path(env["AIRFLOW_HOME"])
    import sqlite3

    with sqlite3.connect(home / "airflow.db") as db:
        events = db.execute("select a.uri from asset_event e join asset a on a.id = e.asset_id "
                            "where e.source_dag_id = 'memwal_fleet'").fetchall()
        mapped = db.execute("select count(*) from task_instance where dag_id = 'memwal_fleet' and "
                            "task_id = 'run_tables'").fetchone()[0]
    assert sorted(u for (u,) in events) == sorted(table_asset(uri).uri for uri in models)  # one per merge commit
    assert mapped == 2  # 3 tables with work, 2 a task
    assert (tmp_path / "fleet-state" / "cache.json").exists() and (tmp_path / "fleet-state" / "plan.json").exists()

    # new data on one table: the next run merges it alone (one chunk, one task)
    t3 = str(lake / "t3")
    models[t3] = write_generations(t3, WL, models[t3], generations=1, seed_offset=100)
    proc = airflow_cli(env, "dags", "test", "memwal_fleet")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "state=success" in out, out[-4000:]
    assert "1 with work in 1 chunks" in out and "memwal fleet: 1 tables run (" in out and "{'" not in out
    assert table_rows(open_table(t3)) == models[t3].sorted_rows()

    after = {uri: tree_digest(uri) for uri in models}
    again = airflow_cli(env, "dags", "test", "memwal_fleet")
    assert again.returncode == 0 and "state=success" in again.stdout + again.stderr, again.stderr[-4000:]
    assert "0 with work in 0 chunks" in again.stdout + again.stderr
    assert {uri: tree_digest(uri) for uri in models} == after  # not a commit, not even a history record


def test_service_levels_are_judged_after_the_run_and_alert_through_a_notifier_not_a_red_run(airflow_env, tmp_path):
    """Two tables past their service level (3 unmerged generations a shard, target 2): the run
    merges one, the other is paused. The DAG run succeeds (a breach is not a failed
    maintenance run); its ``slo`` task judges the state after the run and calls the config's
    notifier, naming only the table still past its target; the page's report is the one made
    after the run."""
    lake = tmp_path / "lake"
    make(lake / "merged"), make(lake / "paused")
    sent = tmp_path / "alerts.jsonl"
    alerts = {"notifiers": [{"notifier": "tests.airflow_notifier.FileNotifier",
                             "args": {"path": str(sent), "message": "{{ memwal_slo.message }}"}}]}
    policy = {"defaults": {"slo": {"generations_per_shard": 2}, "thresholds": {"compact_deleted_fraction": 1}},
              "paused": {str(lake / "paused"): {"by": "ops", "reason": "hands off"}}}
    extra = f"alerts: {json.dumps(alerts)}\npolicy: {json.dumps(policy)}\n"
    config = write_config(tmp_path / "fleet.yaml", lake, extra)
    env = {**airflow_env, "MEMWAL_FLEET_CONFIG": str(config), "PYTHONPATH": str(ROOT)}
    proc = airflow_cli(env, "dags", "test", "memwal_fleet")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "state=success" in out, out[-4000:]
    (alert,) = [json.loads(line) for line in sent.read_text().splitlines()]
    assert alert["tables"] == [str(lake / "paused")] and alert["count"] == 1 and alert["dag_id"] == "memwal_fleet"
    assert alert["message"].startswith("memwal fleet: 1 tables past their service level after the run")
    report = json.loads((tmp_path / "fleet-state" / "plan.json").read_text())["report"]
    rows = {r["table"]: r for r in report["top"]}
    assert rows[str(lake / "merged")]["breaches"] == [] and rows[str(lake / "merged")]["holds"][
        "unmerged_generations"] == 0  # the plan made after the run
    assert rows[str(lake / "paused")]["breaches"] == ["generations_per_shard"]


def test_the_dag_file_lists_no_source_when_parsed_whatever_it_holds(tmp_path, monkeypatch):
    """Parsed with 10 and with 1,000 tables behind its source, the DAG file reads its config
    and nothing else: no listing, no open, no stat of anything under the source (counted by
    Python's audit hooks), and the same DAG."""
    from airflow.models import DagBag

    touched: list[tuple[str, str]] = []
    watching: dict[str, str] = {}

    def audit(event: str, args: tuple) -> None:
        if watching and event in ("open", "os.listdir", "os.scandir", "os.stat", "os.lstat"):
            path = args[0] if args else None
            if isinstance(path, str | bytes | os.PathLike):
                where = os.path.abspath(os.fsdecode(path))
                if where == watching["root"] or where.startswith(watching["root"] + os.sep):
                    touched.append((event, where))

    sys.addaudithook(audit)
    shapes = {}
    for n in (10, 1000):
        lake = tmp_path / f"lake-{n}"
        for i in range(n):
            (lake / f"tenant-{i % 10}" / f"t{i}" / "_versions").mkdir(parents=True)
        config = write_config(tmp_path / f"fleet-{n}.yaml", lake)
        monkeypatch.setenv("MEMWAL_FLEET_CONFIG", str(config))
        watching["root"] = str(lake)
        try:
            bag = DagBag(dag_folder=str(DAGS / "memwal_fleet.py"))
        finally:
            watching.clear()
        assert bag.import_errors == {}
        dag = bag.dags["memwal_fleet"]
        shapes[n] = [(t.task_id, sorted(t.downstream_task_ids)) for t in dag.topological_sort()]
        assert touched == [], touched[:5]
    assert shapes[10] == shapes[1000]
    assert sorted(shapes[10]) == [("plan", ["run_tables"]), ("run_tables", ["summary"]), ("slo", []),
                                  ("summary", ["slo"])]  # the service levels judged after the run


def test_a_bad_fleet_config_is_one_import_error_naming_the_key_and_a_missing_one_names_the_variable(
        tmp_path, monkeypatch):
    from airflow.models import DagBag

    lake = tmp_path / "lake"
    config = tmp_path / "fleet.yaml"
    monkeypatch.setenv("MEMWAL_FLEET_CONFIG", str(config))

    def error() -> str:
        bag = DagBag(dag_folder=str(DAGS / "memwal_fleet.py"))
        assert "memwal_fleet" not in bag.dag_ids
        (message,) = bag.import_errors.values()
        return message

    config.write_text(f"sources: [{lake}]\nbudget: {{worker: 4}}\nengine: flink\n")
    message = error()
    assert "budget: Additional properties are not allowed ('worker' was unexpected)" in message
    assert "engine: 'flink' is not one of ['local', 'spark', 'ray']" in message
    assert "memwal_fleet.schema.json" in message
    config.write_text(f"sources: [{lake}]\npolicy: {{defaults: {{options: {{gc: {{grace_seconds: .nan}}}}}}}}\n")
    assert "policy defaults.options.gc: grace_seconds" in error()
    config.write_text(f"sources: [{{source: {lake}, storage_options: {{aws_secret_access_key: {SECRET}}}}}]\n")
    message = error()
    assert "sources[0].storage_options.aws_secret_access_key: a credential in the config file" in message
    assert SECRET not in message
    # every bad key at once: a schema error, a credential, a bad policy value (issue 64: in stages)
    config.write_text(f"sources: [{{source: {lake}, storage_options: {{aws_secret_access_key: {SECRET}}}}}]\n"
                      "state: {uri: /tmp/s, storage_options: {azure_storage_account_key: k}}\nengine: flink\n"
                      "policy: {defaults: {options: {gc: {grace_seconds: .nan}}}}\n")
    message = error()
    for part in ("engine: 'flink' is not one of", "sources[0].storage_options.aws_secret_access_key: a credential",
                 "state.storage_options.azure_storage_account_key: a credential",
                 "policy defaults.options.gc: grace_seconds"):
        assert part in message, (part, message)
    assert SECRET not in message
    config.write_text("sources: []\n")
    assert "sources: [] should be non-empty" in error()
    # a worker without the config, parsing the file to run one of its tasks: an error naming the variable
    monkeypatch.delenv("MEMWAL_FLEET_CONFIG")
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "memwal_fleet")
    assert "MEMWAL_FLEET_CONFIG is not set" in error()
    monkeypatch.delenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID")  # a whole-folder parse: no fleet DAG, no error
    bag = DagBag(dag_folder=str(DAGS / "memwal_fleet.py"))
    assert bag.import_errors == {} and bag.dag_ids == []


# -- two task instances of one table at once ------------------------------------------------------------
class HoldFirst:
    """Holds the first thread that reaches ``step`` until released; every other thread passes."""

    def __init__(self, step: str) -> None:
        self.step, self.reached, self.go, self.held = step, threading.Event(), threading.Event(), None

    def __call__(self, name: str) -> None:
        if name == self.step and self.held is None:
            self.held = threading.current_thread()
            self.reached.set()
            assert self.go.wait(300)


def test_two_task_instances_of_one_table_commit_once(tmp_path, monkeypatch):
    """What two schedulers or a duplicate trigger would do: the same chunk run twice at once.
    A is held right before its marked merge commit; B runs whole meanwhile and finds the merge
    lease held; then A commits. Rows equal the model, one merge committed; a third run finds
    nothing to merge."""
    from memwal.airflow.fleet_operators import MemWalFleetOperator, MemWalFleetPlanOperator

    lake = tmp_path / "lake"
    model = make(lake / "events")
    uri = str(lake / "events")
    config = write_config(tmp_path / "fleet.yaml", lake, "policy: {defaults: {options: {merge: {lease_wait: 0}, "
                                                         "snapshot: {lease_wait: 0}}}}\n")
    monkeypatch.setenv("MEMWAL_FLEET_CONFIG", str(config))
    (chunk,) = MemWalFleetPlanOperator(task_id="plan").execute(context())
    assert [w["table"] for w in chunk] == [uri] and chunk[0]["jobs"][0] == "merge"

    def run_tables() -> dict:
        op = MemWalFleetOperator(task_id="run_tables", work=chunk, asset_alias="memwal-merged")
        return op.execute(context())

    hold = HoldFirst("merge.before-marked-commit")
    first: dict = {}
    with steps.hooked(hold):
        a = threading.Thread(target=lambda: first.update(run_tables()))
        a.start()
        assert hold.reached.wait(120), "A never reached its merge commit"
        second = run_tables()  # B, whole, while A holds the merge lease
        hold.go.set()
        a.join(300)
    (b_table,) = second["tables"]
    b_merge = b_table["jobs"][0]
    assert b_merge["job"] == "merge" and b_merge["status"] == "held" and b_merge["version"] is None
    (a_table,) = first["tables"]
    assert a_table["jobs"][0]["status"] == "done" and a_table["jobs"][0]["version"] is not None
    assert table_rows(open_table(uri)) == model.sorted_rows()
    merges = [r for r in read_runs(open_table(uri).store, job="merge") if r.versions]
    assert len(merges) == 1 and merges[0].versions[-1] == a_table["jobs"][0]["version"]  # one run (its passes)

    (third,) = run_tables()["tables"]
    assert third["jobs"][0]["status"] == "done" and third["jobs"][0]["summary"] == "nothing to merge"
    assert table_rows(open_table(uri)) == model.sorted_rows()


# -- metrics ----------------------------------------------------------------------------------------------
def test_metrics_carry_the_table_as_a_tag_never_in_a_name(tmp_path, monkeypatch):
    """Two tables named ``events`` under different roots: every per-table gauge has one name
    for all tables and the table's full URI as its ``table`` tag (with InfluxDB tags on); no
    metric name holds a table. The fleet's gauges count the tables by state, the breaches by
    target, and the shards by pending generations (a histogram's buckets, tag ``le``)."""
    from airflow.sdk._shared.observability.metrics import stats
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk._shared.observability.metrics.statsd_logger import get_statsd_logger
    from memwal.airflow.fleet_operators import MemWalFleetPlanOperator
    from statsd import StatsClient

    lake = tmp_path / "lake"
    a, b = lake / "a" / "events", lake / "b" / "events"
    make(a), make(b)
    memwal.open(str(b)).merge()  # b is behind by nothing to merge, a by every generation
    monkeypatch.setenv("MEMWAL_FLEET_CONFIG", str(write_config(tmp_path / "fleet.yaml", lake)))
    for influx in (False, True):
        statsd = StatsdListener()
        stats.initialize(factory=lambda influx=influx, port=statsd.port: get_statsd_logger(
            stats_class=StatsClient, host="127.0.0.1", port=port, prefix="airflow",
            influxdb_tags_enabled=influx, statsd_influxdb_enabled=influx), export_legacy_names=False)
        try:
            MemWalFleetPlanOperator(task_id="plan").execute(context())
        finally:
            stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
            lines = statsd.close()
        names = {line.split(":", 1)[0].split(",", 1)[0] for line in lines}
        assert not any("events" in n or str(tmp_path) in n for n in names), names  # no table in a name
        if not influx:
            assert sorted(metric(lines, "memwal.table.lag_generations")) == ["0|g", "6|g"]  # one name, tags dropped
            assert metric(lines, "memwal.fleet.discovered") == ["2|g"]
        else:
            name = "airflow.memwal.table.lag_generations"
            assert sorted(line for line in lines if line.startswith(f"{name},")) == sorted(
                [f"{name},table={a}:6|g", f"{name},table={b}:0|g"])
            behind = "airflow.memwal.fleet.tables,state=behind"
            assert [line for line in lines if line.startswith(behind)] == [f"{behind}:2|g"]  # b: catch-up, snapshot
            pending = [line for line in lines if line.startswith("airflow.memwal.fleet.shards.pending,le=")]
            assert len(pending) == 13 and "airflow.memwal.fleet.shards.pending,le=4:2|g" in pending, pending


# -- Spark --------------------------------------------------------------------------------------------------
def test_a_chunk_on_spark_is_one_spark_submit(tmp_path, monkeypatch):
    """engine spark: the mapped task submits ``jobs/fleet_chunk.py`` once for its chunk; the
    tables' storage options travel in a private file, never on the command line."""
    from memwal.airflow.fleet_operators import MemWalFleetOperator, MemWalFleetPlanOperator

    lake = tmp_path / "lake"
    models = {str(lake / "t1"): make(lake / "t1"), str(lake / "t2"): make(lake / "t2")}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("PATH", f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    extra = ("engine: spark\nspark: {conn_id: spark_local, env: {PYSPARK_PYTHON: " + json.dumps(sys.executable)
             + "}}\nbudget: {tables_per_task: 5}\n")
    config = tmp_path / "fleet.yaml"
    config.write_text(f"sources: [{json.dumps(str(lake))}]\nschedule: null\n" + extra)
    monkeypatch.setenv("MEMWAL_FLEET_CONFIG", str(config))
    (chunk,) = MemWalFleetPlanOperator(task_id="plan").execute(context())
    ctx = context()
    doc = MemWalFleetOperator(task_id="run_tables", work=chunk, asset_alias="memwal-merged").execute(ctx)
    assert sorted(t["table"] for t in doc["tables"]) == sorted(models) and doc["not_started"] == []
    assert all(t["status"] == "ok" and t["jobs"][0]["version"] is not None for t in doc["tables"])
    for uri, model in models.items():
        assert table_rows(open_table(uri)) == model.sorted_rows()
        assert {r.engine for r in read_runs(open_table(uri).store, job="merge")} == {"local"}  # inside its task
    assert len(ctx["outlet_events"][AssetAlias("memwal-merged")].asset_alias_events) == 2


def test_chunks_stay_below_max_map_length_in_debt_order_and_carry_no_credential():
    from memwal.airflow.fleet_work import chunks

    from memwal.fleet.run import TableWork

    work = [TableWork(f"s3://lake/t{i}", "s3://lake", 5000 - i, ("merge",), {"merge": {"engine": "local"}},
                      {"aws_region": "eu-west-1", "aws_secret_access_key": SECRET}) for i in range(5000)]
    out = chunks(work, 2, 1024)
    assert len(out) < 1024 and sum(len(c) for c in out) == 5000
    assert [d["table"] for c in out for d in c] == [w.table for w in work]  # the most debt first
    assert SECRET not in json.dumps(out) and out[0][0]["storage_options"] == {"aws_region": "eu-west-1"}
    assert len(chunks(work[:10], 4, 1024)) == 3


# -- the fleet page in Airflow's UI ---------------------------------------------------------------------------
def codes(text: str) -> str:
    return ",".join(str(ord(c)) for c in text)


def test_the_fleet_page_inside_the_airflow_ui_ranks_links_and_runs_no_script(airflow_env, tmp_path, monkeypatch):
    lake = tmp_path / "lake"
    with canary() as c:
        # folder names (a table URI is storage's to choose) that try to run script in the page
        tables = {"a/events": lake / "a" / "events", "b/events": lake / "b" / "events",
                  "hostile": lake / f"<img src=x onerror=\"fetch(String.fromCharCode({codes(c.url('img'))}))\">",
                  "svg": lake / f"<svg onload='fetch(String.fromCharCode({codes(c.url('svg'))}))'>x"}
        make(tables["a/events"], Workload(base_rows=100, shards=2, generations=4, rows_per_generation=10, seed=1))
        make(tables["b/events"])
        small = Workload(base_rows=50, shards=1, generations=1, rows_per_generation=5, seed=2)
        make(tables["hostile"], small), make(tables["svg"], small)
        config = write_config(tmp_path / "fleet.yaml", lake)
        monkeypatch.setenv("MEMWAL_FLEET_CONFIG", str(config))
        from memwal.airflow.fleet_operators import MemWalFleetPlanOperator

        MemWalFleetPlanOperator(task_id="plan").execute(context())  # the page shows the last plan, never plans
        with api_server({**airflow_env, "MEMWAL_FLEET_CONFIG": str(config)}, tmp_path) as (base, _, _):
            status, headers, page = get_with_headers(f"{base}/memwal/fleet")
            assert status == 200
            policy = headers["content-security-policy"]
            assert "script-src 'none'" in policy and "sandbox" in policy and "allow-scripts" not in policy
            assert "<img src=x onerror" not in page and "&lt;img src=x onerror" in page
            assert get_with_headers(f"{base}/memwal/fleet/tables?uri=/etc")[0] == 404  # only the fleet's tables
            with browser() as b:
                b.navigate(f"{base}/plugin/memwal")
                b.wait_for_frame("/memwal/", "document.readyState === 'complete' && "
                                             "!!document.querySelector('a.fleet-link')")
                b.frame_evaluate("/memwal/", "document.querySelector('a.fleet-link').click()")
                seen = b.wait_for_frame("/memwal/fleet", """(() => {
                    const rows = document.querySelectorAll('tr.table-row');
                    if (document.readyState !== 'complete' || !rows.length) return null;
                    return {tables: [...rows].map(r => r.dataset.table),
                            debts: [...rows].map(r => +r.querySelectorAll('td.num')[1].textContent),
                            links: [...rows].map(r => r.querySelector('a').textContent),
                            kpis: Object.fromEntries([...document.querySelectorAll('div.kpi[data-state]')].map(
                                k => [k.dataset.state, +k.querySelector('.value').textContent])),
                            scripts: document.querySelectorAll('script, img, svg:not(.chart), foreignObject').length,
                            handlers: [...document.querySelectorAll('*')].filter(
                                e => [...e.attributes].some(a => a.name.startsWith('on'))).length}; })()""")
                assert seen["tables"][0] == str(tables["a/events"])  # 8 unmerged generations: the most debt
                assert seen["debts"] == sorted(seen["debts"], reverse=True) and seen["debts"][-1] > 0
                assert sorted(seen["tables"]) == sorted(map(str, tables.values())) == sorted(seen["links"])
                assert seen["kpis"] == {"behind": 4, "waiting": 0, "held": 0, "paused": 0, "problem": 0, "idle": 0}
                assert seen["scripts"] == 0 and seen["handlers"] == 0
                # the hostile table's link opens its status page inside the UI
                index = seen["tables"].index(str(tables["hostile"]))
                b.frame_evaluate("/memwal/fleet", f"document.querySelectorAll('tr.table-row a')[{index}].click()")
                shown = b.wait_for_frame("/memwal/fleet/tables", """(() => {
                    const uri = document.querySelector('#table-uri');
                    if (document.readyState !== 'complete' || !uri) return null;
                    return {uri: uri.textContent, scripts: document.querySelectorAll('script, img').length}; })()""")
            assert shown == {"uri": str(tables["hostile"]), "scripts": 0}
        hits = list(c.hits)
    assert hits == []


def test_every_page_and_link_of_the_view_works_after_a_real_login(airflow_env, tmp_path, monkeypatch):
    """A real login (the simple auth manager's form, a user with a password; no all-admins
    shortcut) in Chromium, then every page the plugin adds, reached by clicking every link it
    shows, the way a person does: the list of tables, a table's page and its DAG, an unreadable
    table's error page, the fleet page, a fleet table's page, the fleet's DAGs, and back. Each
    answers with the page, never ``{"detail":"Not authenticated"}`` (what a sandboxed page with an
    opaque origin got: its links carried no session cookie), and the UI's address follows."""
    lake = tmp_path / "lake"
    make(lake / "a" / "events"), make(lake / "b" / "events")
    (tmp_path / "not-a-table").mkdir()
    config = write_config(tmp_path / "fleet.yaml", lake)
    monkeypatch.setenv("MEMWAL_FLEET_CONFIG", str(config))
    from memwal.airflow.fleet_operators import MemWalFleetPlanOperator

    MemWalFleetPlanOperator(task_id="plan").execute(context())
    env = {**airflow_env, "MEMWAL_FLEET_CONFIG": str(config)}
    with api_server(env, tmp_path, login=("alice", "alice-pass-0123")) as (base, tables_config, _):
        tables_config.write_text(f"tables:\n  - {{name: events, table: {json.dumps(str(lake / 'a' / 'events'))}}}\n"
                                 f"  - {{name: broken, table: {json.dumps(str(tmp_path / 'not-a-table'))}}}\n")
        assert get_with_headers(f"{base}/memwal/fleet")[0] == 401  # no session: nothing shown
        with browser() as b:
            b.log_in(base, "alice", "alice-pass-0123")

            def frame(part: str, ready: str) -> dict:
                """The view's frame at ``part`` once ``ready`` holds: what it found, its links, its text."""
                return b.wait_for_frame(part, f"""(() => {{ if (document.readyState !== 'complete') return null;
                    const found = {ready}; if (!found) return null;
                    return {{found, links: [...document.querySelectorAll('a')].map(a => a.textContent.trim()),
                             text: document.body.innerText.slice(0, 300)}}; }})()""")

            def click(part: str, label: str) -> None:
                """Click the link ``label`` of the frame at ``part``, as a person would."""
                found = b.frame_evaluate(part, f"""(() => {{ const a = [...document.querySelectorAll('a')].find(
                    a => a.textContent.trim() === {json.dumps(label)}); if (!a) return false; a.click();
                    return true; }})()""", user_gesture=True)
                assert found, (part, label)

            def at(path: str) -> None:
                """The UI's address shows the view's page ``path`` (the frame's, followed)."""
                b.wait_for(f"decodeURIComponent(location.pathname + location.search) === {json.dumps(path)}")

            b.navigate(f"{base}/plugin/memwal")
            index = frame("/memwal/", "document.querySelectorAll('a.table-link').length === 2")
            assert index["links"] == ["The fleet", "events", "broken"]

            click("/memwal/", "events")
            at("/plugin/memwal/memwal/tables/config/events")
            page = frame("/memwal/tables/config/events", "document.querySelector('#table-uri')?.textContent")
            assert page["found"] == str(lake / "a" / "events")
            # Airflow's own pages are named, never linked: opened in the view's frame they showed
            # Airflow's whole UI there, a second navigation rail (issue 64)
            assert page["links"] == ["← all MemWAL tables"]
            assert "DAG memwal_events (in Airflow's DAG list)" in page["text"]
            click("/memwal/tables/config/events", "← all MemWAL tables")
            at("/plugin/memwal/memwal/")
            frame("/memwal/", "!!document.querySelector('a.fleet-link')")

            click("/memwal/", "broken")  # an unreadable table: its error page, and back
            at("/plugin/memwal/memwal/tables/config/broken")
            error = frame("/memwal/tables/config/broken", "document.querySelector('#error')?.textContent")
            assert "cannot read it" in error["found"] and error["links"] == ["← back"]
            click("/memwal/tables/config/broken", "← back")
            at("/plugin/memwal/memwal/")

            frame("/memwal/", "!!document.querySelector('a.fleet-link')")
            click("/memwal/", "The fleet")
            at("/plugin/memwal/memwal/fleet")
            fleet = frame("/memwal/fleet", "document.querySelectorAll('tr.table-row').length")
            assert fleet["found"] == 2 and "Not authenticated" not in fleet["text"]
            first = str(lake / "a" / "events")
            assert first in fleet["links"]
            click("/memwal/fleet", first)
            at(f"/plugin/memwal/memwal/fleet/tables?uri={first}")
            shown = frame("/memwal/fleet/tables", "document.querySelector('#table-uri')?.textContent")
            assert shown["found"] == first and shown["links"][:1] == ["← the fleet"]
            assert "DAG memwal_fleet (in Airflow's DAG list)" in shown["text"]
            click("/memwal/fleet/tables", "← the fleet")
            at("/plugin/memwal/memwal/fleet")

            named = frame("/memwal/fleet", "document.querySelector('#control-dag')?.textContent")
            assert "memwal_fleet_control" in named["found"] and not [x for x in fleet["links"] if "DAG" in x]
            assert "DAG memwal_fleet (in Airflow's DAG list)" in named["text"]


def test_the_control_dag_pauses_live_and_refuses_what_names_nothing(tmp_path, monkeypatch):
    """The control DAG's task, as a triggered run gives it its params and user: a pause shows at
    once in ``fleet status`` (no plan since); a pause of nothing and a resume of what is not
    paused fail the run (not retried), naming the target, with nothing written; a cancel with
    nothing running says so."""
    from airflow.sdk.exceptions import AirflowFailException
    from memwal.airflow.fleet_control import MemWalFleetControlOperator
    from memwal.airflow.fleet_operators import MemWalFleetPlanOperator

    lake = tmp_path / "lake"
    make(lake / "a" / "events")
    table = str(lake / "a" / "events")
    config = write_config(tmp_path / "fleet.yaml", lake)
    monkeypatch.setenv("MEMWAL_FLEET_CONFIG", str(config))
    MemWalFleetPlanOperator(task_id="plan").execute(context())
    state = tmp_path / "fleet-state"

    def control(action: str, target: str, **more: object) -> dict:
        class Run:
            triggering_user_name = "carol"

        ctx = {**context(), "params": {"action": action, "target": target, "reason": "on call", **more},
               "dag_run": Run()}
        return MemWalFleetControlOperator(task_id="control").execute(ctx)

    assert control("pause", table)["paused"] == table
    shown = json.loads(run_cli("fleet", "status", "--state", str(state), "--json").stdout)
    (row,) = shown["tables"]
    assert row["state"] == "paused" and row["paused"]["by"] == "carol"  # read live: no plan since
    before = (state / "controls.json").read_bytes()
    for action, target, why in (("pause", str(lake / "nowhere"), "matches no table"),
                                ("resume", str(lake / "a"), "not paused")):
        with pytest.raises(AirflowFailException, match=why) as refused:
            control(action, target)
        assert target in str(refused.value)
    assert (state / "controls.json").read_bytes() == before  # refused: nothing written
    assert control("resume", table)["resumed"] == table
    assert control("cancel", table)["cancelled"] == []  # nothing running: nothing asked
    before = (state / "controls.json").read_bytes()
    with pytest.raises(AirflowFailException, match="no table of the fleet's sources there"):
        control("cancel", str(lake / "nowhere"))
    monkeypatch.delenv("MEMWAL_FLEET_KEY", raising=False)  # pauses unauthenticated: every table needs a yes
    with pytest.raises(AirflowFailException, match="confirm with --yes"):
        control("pause", "*")
    assert (state / "controls.json").read_bytes() == before  # refused: nothing written
    assert control("pause", "*", confirm_fleet_wide=True)["paused"] == "*"
