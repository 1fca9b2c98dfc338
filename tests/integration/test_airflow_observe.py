"""What Airflow shows of the MemWAL tasks, through the real thing: Airflow's own StatsD metrics
(received on a UDP socket on loopback), OpenLineage events (the OpenLineage provider's file
transport) from ``airflow dags test``, and the "MemWAL" view served by a real ``airflow
api-server`` and opened inside the Airflow UI by headless Chromium."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowFailException
from memwal.airflow.lineage import dataset_id
from memwal.airflow.operators import MemWalMergeOperator

import memwal
from memwal.demo import shard_ids_for
from memwal.history.log import read_runs
from tests.airflow_server import api_server as running_api_server
from tests.airflow_server import get, get_with_headers
from tests.browser import browser
from tests.conftest import SMALL
from tests.helpers import ROOT, migrated_airflow_home

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)

DAGS = ROOT / "dags"
VENV_BIN = Path(sys.executable).parent
SECRET = "memwal-observe-secret-0123456789"


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow-observe")
    env = migrated_airflow_home(home)
    return env, home


class StatsdListener:
    """A StatsD server in miniature: every datagram received on a loopback UDP port."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # Datagrams a finished process sent on loopback are already in the socket's buffer:
        # after close() the loop still drains them, and stops at the first empty wait.
        while True:
            try:
                self.lines += self.sock.recv(65535).decode().splitlines()
            except TimeoutError:
                if self._stop.is_set():
                    return

    def close(self) -> list[str]:
        self._stop.set()
        self._thread.join()
        self.sock.close()
        return self.lines


def without_none(value):
    if isinstance(value, dict):
        return {k: without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_none(v) for v in value]
    return value


def metric(lines: list[str], name: str) -> list[str]:
    """The values sent for metric ``name`` (``airflow.<name>:<value>|<type>``), in order."""
    prefix = f"airflow.{name}:"
    return [line[len(prefix):] for line in lines if line.startswith(prefix)]


def test_dags_test_sends_airflow_stats_and_openlineage_events_with_the_run_facet(airflow_home, make_table, tmp_path):
    env, _ = airflow_home
    table, _ = make_table()
    lineage = tmp_path / "lineage.jsonl"
    statsd = StatsdListener()
    env = {
        **env,
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(lineage), "append": True}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "memwal-test",
        # credentials in a connection (the run conf would be copied into every OpenLineage event)
        "AIRFLOW_CONN_MEMWAL_OBSERVED": json.dumps({"conn_type": "memwal", "host": table.uri, "password": SECRET}),
    }
    conf = {"table": table.uri, "conn_id": "memwal_observed", "engine": "local", "grace_seconds": 0,
            "writer_idle_seconds": 0,
            "expire_versions": 0}
    try:
        proc = subprocess.run([str(VENV_BIN / "airflow"), "dags", "test", "memwal_maintenance", "-c", json.dumps(conf)],
                              env=env, capture_output=True, text=True, timeout=600)
    finally:
        lines = statsd.close()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "state=success" in out, out[-4000:]

    runs = {r.job: r for r in read_runs(table.store)}  # newest of each job: this DAG run's
    merge, gc = runs["merge"], runs["gc"]
    assert merge.figures["generations"] == 12 and gc.figures["generations"] == 12 and gc.figures["bytes"] > 0

    # Airflow's StatsD client sent our metrics, with the job's own figures
    for job in ("merge", "catchup", "compact", "snapshot", "gc"):
        (duration,) = metric(lines, f"memwal.{job}.duration")
        assert duration.endswith("|ms") and float(duration[:-3]) >= 0
        assert metric(lines, f"memwal.{job}.ok") == ["1|c"]
    assert metric(lines, "memwal.merge.generations") == ["12|c"]
    assert metric(lines, "memwal.merge.rows_upserted") == [f"{merge.figures['rows_upserted']}|c"]
    assert metric(lines, "memwal.merge.rows_deleted") == [f"{merge.figures['rows_deleted']}|c"]
    assert metric(lines, "memwal.gc.bytes_deleted") == [f"{gc.figures['bytes']}|c"]
    assert metric(lines, "memwal.gc.generations_deleted") == ["12|c"]
    # every run left nothing to merge: the table's series (one name, the table a tag: plain StatsD drops it)
    assert metric(lines, "memwal.table.lag_generations") == ["0|g"] * 5
    assert not [line for line in lines if line.startswith("airflow.memwal.lag.")]
    assert not any(SECRET in line for line in lines)

    # OpenLineage: each task's COMPLETE event has the table as input and output and the memwal facet
    events = [json.loads(line) for line in lineage.read_text().splitlines()]
    assert SECRET not in lineage.read_text()
    complete = {e["job"]["name"].split(".", 1)[1]: e for e in events
                if e["eventType"] == "COMPLETE" and "." in e["job"]["name"]}
    table_ds = {"namespace": "file", "name": table.uri}
    for job in ("merge", "catchup", "compact", "snapshot", "gc"):
        event, record = complete[job], runs[job]
        assert [{k: d[k] for k in ("namespace", "name")} for d in event["inputs"]] == [table_ds]
        assert [{k: d[k] for k in ("namespace", "name")} for d in event["outputs"]] == [table_ds]
        facet = event["run"]["facets"]["memwal"]
        assert facet["_schemaURL"] == "urn:memwal-jobs:openlineage:MemWalRunFacet:1-0-0"
        assert (facet["job"], facet["runId"], facet["outcome"], facet["engine"]) == (job, record.run_id, "ok", "local")
        assert facet["versionsCommitted"] == record.versions
        assert facet["runs"][0]["figures"] == without_none(record.figures)  # OpenLineage drops nulls
        version = event["outputs"][0].get("facets", {}).get("version")
        assert (version or {}).get("datasetVersion") == (str(max(record.versions)) if record.versions else None)
    merged = complete["merge"]["run"]["facets"]["memwal"]
    assert merged["generationsMerged"] == 12 and merged["versionsCommitted"]
    assert (merged["rowsUpserted"], merged["rowsDeleted"]) == (merge.figures["rows_upserted"],
                                                               merge.figures["rows_deleted"])


def test_a_failed_task_gives_a_failure_facet_and_a_failed_metric(tmp_path):
    from airflow.sdk._shared.observability.metrics import stats
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk._shared.observability.metrics.statsd_logger import get_statsd_logger
    from statsd import StatsClient

    statsd = StatsdListener()
    stats.initialize(factory=lambda: get_statsd_logger(stats_class=StatsClient, host="127.0.0.1", port=statsd.port,
                                                       prefix="airflow"), export_legacy_names=False)
    try:
        op = MemWalMergeOperator(task_id="merge", table=str(tmp_path / "not-a-table"))
        with pytest.raises(AirflowFailException, match="bad input"):
            op.execute({"params": {}})
        lineage = op.get_openlineage_facets_on_failure(None)
    finally:
        stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
        lines = statsd.close()
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("file", str(tmp_path / "not-a-table"))]
    facet = lineage.run_facets["memwal"]
    assert (facet.job, facet.outcome, facet.runId, facet.versionsCommitted) == ("merge", "failed", None, [])
    assert "bad input" in facet.error
    assert metric(lines, "memwal.merge.failed") == ["1|c"] and len(metric(lines, "memwal.merge.duration")) == 1


@pytest.mark.parametrize("uri, options, expected", [
    ("/data/events", {}, ("file", "/data/events")),
    ("file:///data/events/", {}, ("file", "/data/events")),
    ("s3://lake/warehouse/events", {}, ("s3://lake", "warehouse/events")),
    ("s3a://lake/events", {}, ("s3://lake", "events")),
    ("gs://lake/events", {}, ("gs://lake", "events")),
    ("abfss://c@acct.dfs.core.windows.net/events", {}, ("abfss://c@acct.dfs.core.windows.net", "events")),
    ("az://c/events", {"azure_storage_account_name": "acct"}, ("wasbs://c@acct.dfs.core.windows.net", "events")),
    ("az://c/events", {}, ("az://c", "events")),
])
def test_openlineage_dataset_names_follow_the_naming_conventions(uri, options, expected):
    from memwal.airflow.reporting import _ACCOUNT_KEYS

    account = next((options[k] for k in _ACCOUNT_KEYS if k in options), None)
    assert dataset_id(uri, account) == expected


# -- the MemWAL view in the Airflow UI ---------------------------------------------------------------
@pytest.fixture
def api_server(airflow_home, tmp_path):
    env, _ = airflow_home
    with running_api_server(env, tmp_path) as server:
        yield server


def test_memwal_view_shows_each_table_page_inside_the_airflow_ui(api_server, make_table):
    base, config, env = api_server
    events, _ = make_table(name="events")
    users, _ = make_table(name="users")
    ids = shard_ids_for(SMALL)
    memwal.open(events.uri).merge(shards=[ids[0]])
    config.write_text(f"tables:\n  - name: events\n    table: {events.uri}\n")
    # a memwal connection in the metadata database is listed too
    add = subprocess.run([str(VENV_BIN / "airflow"), "connections", "add", "memwal_users", "--conn-type", "memwal",
                          "--conn-host", users.uri, "--conn-password", SECRET], env=env, capture_output=True,
                         text=True, timeout=300)
    assert add.returncode == 0, add.stderr[-2000:]

    status, plugins = get(f"{base}/api/v2/plugins")
    assert status == 200
    (plugin,) = [p for p in json.loads(plugins)["plugins"] if p["name"] == "memwal"]
    (view,) = plugin["external_views"]
    assert (view["name"], view["href"], view["url_route"]) == ("MemWAL", "memwal/", "memwal")
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/memwal"]

    with browser() as b:
        # the UI's navigation has the MemWAL entry; its page frames the list of tables, whose
        # policy sandboxes it (no script, no form; tests/adversarial shows planted markup stays inert)
        b.navigate(f"{base}/plugin/memwal")
        tables = b.wait_for_frame("/memwal/", """(() => { const rows = document.querySelectorAll('tr.table');
            if (document.readyState !== 'complete' || !rows.length) return null;
            return [...rows].map(r => r.dataset.source + '/' + r.dataset.key); })()""")
        assert tables == ["config/events", "connection/memwal_users"]
        assert b.evaluate("[...document.querySelectorAll('a')].some(a => a.textContent.trim() === 'MemWAL')")
        policy = get_with_headers(f"{base}/memwal/")[1]["content-security-policy"]
        assert "sandbox allow-same-origin" in policy and "allow-scripts" not in policy and "allow-forms" not in policy
        # a click on the table opens its status page inside the UI: every shard listed, one bar each
        b.frame_evaluate("/memwal/", "document.querySelector('a.table-link').click()")
        seen = b.wait_for_frame("/tables/config/events", """(() => {
            const bars = document.querySelectorAll('svg#lag rect.bar');
            if (document.readyState !== 'complete' || !bars.length) return null;
            return {uri: document.querySelector('#table-uri').textContent,
                    shards: [...document.querySelectorAll('tr.shard')].map(r => r.dataset.shard),
                    bars: Object.fromEntries([...bars].map(b => [b.dataset.shard, +b.dataset.value]))}; })()""")
    assert seen["uri"] == events.uri
    assert sorted(seen["shards"]) == sorted(ids) and seen["shards"][-1] == ids[0]  # merged: least behind
    assert seen["bars"] == {ids[0]: 0, ids[1]: 4, ids[2]: 4}

    # the connection's table, straight from the API server; the credential is never shown
    status, page = get(f"{base}/memwal/tables/connection/memwal_users")
    assert status == 200 and users.uri in page and SECRET not in page
    assert get(f"{base}/memwal/tables/config/nope")[0] == 404


def test_memwal_view_requires_an_airflow_user():
    from fastapi.testclient import TestClient
    from memwal.airflow.views import create_app

    client = TestClient(create_app())
    for path in ("/", "/tables/config/events"):
        response = client.get(path)
        assert response.status_code == 401 and "events" not in response.text
