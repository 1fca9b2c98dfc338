"""The Airflow integration against real tables: DAG files, `airflow dags test`, operators
(local and Spark engines), sensors in poke and deferrable mode, the trigger, the hook,
secrets masking and the plugin/provider registration."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import AssetAlias
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from airflow.sdk.execution_time.context import OutletEventAccessors
from memwal.airflow.assets import table_asset
from memwal.airflow.hooks import MemWalHook
from memwal.airflow.operators import (
    MemWalCatchupOperator,
    MemWalCompactOperator,
    MemWalGcOperator,
    MemWalMergeOperator,
    MemWalSnapshotOperator,
)
from memwal.airflow.sensors import MergedGenerationSensor, MergeLagSensor
from memwal.airflow.triggers import MemWalStatusTrigger

import memwal
from memwal.core import steps
from memwal.demo import shard_ids_for
from memwal.lease import Lease
from memwal.table.shards import all_shard_manifests, list_generation_dirs
from tests.conftest import SMALL, table_rows
from tests.helpers import ROOT, migrated_airflow_home

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)

DAGS = ROOT / "dags"
VENV_BIN = Path(sys.executable).parent
SECRET = "memwal-test-secret-0123456789"


class FakeTI:
    def __init__(self) -> None:
        self.xcom: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.xcom[key] = value


def context() -> dict:
    return {"ti": FakeTI(), "outlet_events": OutletEventAccessors(), "params": {}}


def alias_events(ctx: dict, name: str = "memwal-merged") -> list:
    return ctx["outlet_events"][AssetAlias(name)].asset_alias_events


def progress(table) -> dict[str, int]:
    return dict(table.manifest().compacted)


# -- a real Airflow home with a migrated SQLite metadata database ---------------------------
@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow-home")
    started = time.monotonic()
    env = migrated_airflow_home(home)
    print(f"airflow db migrate took {time.monotonic() - started:.1f}s")
    return env, home


def airflow_cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "airflow"), *args], env=env, capture_output=True, text=True, timeout=300)


def db_rows(home: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(home / "airflow.db") as db:
        return db.execute(sql).fetchall()


def xcom_value(home: Path, dag_id: str, task_id: str, *, latest: bool = False):
    """The task's return value: its only one, or (``latest``) that of the DAG's latest run."""
    run = (f" and run_id = (select run_id from dag_run where dag_id='{dag_id}' order by id desc limit 1)"
           if latest else "")
    rows = db_rows(
        home, f"select value from xcom where dag_id='{dag_id}' and task_id='{task_id}' and key='return_value'{run}"
    )
    assert len(rows) == 1
    value = json.loads(rows[0][0])
    return json.loads(value) if isinstance(value, str) else value


def test_airflow_dags_test_memwal_maintenance_merges_and_catches_up(airflow_env, make_table):
    env, home = airflow_env
    table, model = make_table()
    before = {s: set(list_generation_dirs(table.store, s).values()) for s in shard_ids_for(SMALL)}
    conf = {"table": table.uri, "storage_options": {"aws_secret_access_key": SECRET}, "engine": "local"}
    proc = airflow_cli(env, "dags", "test", "memwal_maintenance", "-c", json.dumps(conf))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "state=success" in out

    # merged, caught up, snapshot refreshed
    m = table.manifest()
    assert m.compacted == {s: 4 for s in shard_ids_for(SMALL)}
    assert m.index_catchup == {"id_idx": m.compacted, "vec_idx": m.compacted}
    assert table_rows(table) == model.sorted_rows()
    assert m.mem_wal.snapshot_ts_millis > 0

    # GC ran with the default 600 s grace: nothing deleted, and the grace period is why
    gc = xcom_value(home, "memwal_maintenance", "gc")
    assert gc["deleted"] == [] and gc["wal_entries_deleted"] == 0
    assert len(gc["blocked"]) == 12
    assert all("grace-period" in (b.get("reasons") or [b["reason"]]) for b in gc["blocked"])
    assert {s: set(list_generation_dirs(table.store, s).values()) for s in shard_ids_for(SMALL)} == before

    # every task's JSON result went to XCom; the merge emitted one Asset event (via the alias)
    merge = xcom_value(home, "memwal_maintenance", "merge")
    assert merge["version"] is not None and merge["blocked"] == []
    assert xcom_value(home, "memwal_maintenance", "catchup")["all_recorded"] is True
    asset = table_asset(table.uri)
    events = db_rows(
        home,
        "select e.extra from asset_event e join asset a on a.id = e.asset_id "
        f"where a.uri = '{asset.uri}' and a.name = '{asset.name}'",
    )
    assert len(events) == 1 and json.loads(events[0][0])["version"] == merge["version"]

    # the credential never reached the logs, the rendered templates or the serialized DAG
    assert SECRET not in out
    for sql in ("select rendered_fields from rendered_task_instance_fields", "select data from serialized_dag"):
        assert all(SECRET not in str(r) for r in db_rows(home, sql))


def test_the_maintenance_dag_runs_on_a_ray_cluster_named_by_a_connection(airflow_env, ray_cluster, make_table):
    """``engine: ray`` with ``ray_conn_id``: each task a Ray client of the cluster the connection
    names, its token from the connection's password (never in the DAG's environment, the run
    conf, a log or a rendered template)."""
    env, home = airflow_env
    host, port = ray_cluster.address.rsplit(":", 1)
    token = ray_cluster.env["RAY_AUTH_TOKEN"]
    conn = {"conn_type": "generic", "host": host, "port": int(port), "password": token}
    table, model = make_table()
    conf = {"table": table.uri, "engine": "ray", "ray_conn_id": "ray_test", "grace_seconds": 0,
            "writer_idle_seconds": 0, "expire_versions": 0}
    proc = airflow_cli({**env, "AIRFLOW_CONN_RAY_TEST": json.dumps(conn)}, "dags", "test", "memwal_maintenance",
                       "-c", json.dumps(conf))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "state=success" in out, out[-4000:]
    for job in ("merge", "catchup", "compact", "gc", "snapshot"):
        assert xcom_value(home, "memwal_maintenance", job, latest=True)["engine"] == "ray", job
    assert len(xcom_value(home, "memwal_maintenance", "gc", latest=True)["deleted"]) == 12
    assert table_rows(table) == model.sorted_rows() and progress(table) == {s: 4 for s in shard_ids_for(SMALL)}
    assert token not in out
    for sql in ("select rendered_fields from rendered_task_instance_fields", "select data from serialized_dag"):
        assert all(token not in str(r) for r in db_rows(home, sql))


def test_config_generated_dag_runs_with_its_gc_policy(airflow_env, make_table, tmp_path):
    env, home = airflow_env
    table, model = make_table(name="events")
    config = tmp_path / "memwal.yaml"
    config.write_text(
        f"tables:\n  - table: {table.uri}\n    schedule: null\n    lag: false\n"
        "    gc: {grace_seconds: 0, writer_idle_seconds: 0, expire_versions: 0}\n"
    )
    proc = airflow_cli({**env, "MEMWAL_CONFIG": str(config)}, "dags", "test", "memwal_events")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert table_rows(table) == model.sorted_rows()
    # grace 0 and expired versions: GC deleted every merged, caught-up generation
    assert all(not list_generation_dirs(table.store, s) for s in shard_ids_for(SMALL))
    events = db_rows(
        home,
        "select a.uri from asset_event e join asset a on a.id = e.asset_id where e.source_dag_id = 'memwal_events'",
    )
    assert events == [(table_asset(table.uri).uri,)]


def test_maintenance_dag_on_azure_through_a_wasb_connection(airflow_env, azure_server):
    """One DAG run against Azure Blob Storage (Azurite): the credentials come from Airflow's own
    ``wasb`` connection type (account name and key), the table URI from the run's conf."""
    from memwal.demo import create_base_table, write_generations
    from memwal.table import open_table
    from tests.azureserver import ACCOUNT, ACCOUNT_KEY

    env, home = airflow_env
    uri, opts = azure_server.new_table("dag")
    _, model = create_base_table(uri, SMALL, opts)
    write_generations(uri, SMALL, model, storage_options=opts)
    conn = {"conn_type": "wasb", "login": ACCOUNT, "password": ACCOUNT_KEY, "host": azure_server.endpoint}
    conf = {"table": uri, "conn_id": "azure_blob", "engine": "local", "grace_seconds": 0, "writer_idle_seconds": 0,
            "expire_versions": 0}
    proc = airflow_cli({**env, "AIRFLOW_CONN_AZURE_BLOB": json.dumps(conn)}, "dags", "test", "memwal_maintenance",
                       "-c", json.dumps(conf))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    table = open_table(uri, opts)
    assert table_rows(table) == model.sorted_rows()
    assert table.manifest().compacted == {s: SMALL.generations for s in shard_ids_for(SMALL)}
    assert all(not list_generation_dirs(table.store, s) for s in shard_ids_for(SMALL))
    (gc,) = db_rows(home, "select value from xcom where dag_id='memwal_maintenance' and task_id='gc' "
                          "and key='return_value' order by timestamp desc limit 1")  # this run's (others ran before)
    gc_doc = json.loads(gc[0])
    gc_doc = json.loads(gc_doc) if isinstance(gc_doc, str) else gc_doc
    assert gc_doc["table"] == uri and len(gc_doc["deleted"]) == SMALL.shards * SMALL.generations
    assert ACCOUNT_KEY not in out
    for sql in ("select rendered_fields from rendered_task_instance_fields", "select data from serialized_dag"):
        assert all(ACCOUNT_KEY not in str(r) for r in db_rows(home, sql))


def test_storage_options_from_airflow_cloud_connections(monkeypatch):
    """aws, wasb (key, connection string, service principal), adls and google_cloud_platform
    connections, as Airflow reads them from its environment, become Lance storage options."""
    from airflow.sdk import BaseHook

    conns = {
        "s3c": {"conn_type": "aws", "login": "AKIAX", "password": "sk-1", "extra": {
            "region_name": "eu-west-1", "endpoint_url": "http://127.0.0.1:9000", "aws_session_token": "tok-1"}},
        "wasb_key": {"conn_type": "wasb", "login": "acct", "password": "a2V5", "extra": {"table": "az://c/t"}},
        "wasb_cs": {"conn_type": "wasb", "extra": {"connection_string": "DefaultEndpointsProtocol=http;"
                    "AccountName=dev;AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:10000/dev;"}},
        "wasb_sp": {"conn_type": "wasb", "login": "client-1", "password": "secret-1",
                    "host": "https://acct.blob.core.windows.net", "extra": {"tenant_id": "tenant-1"}},
        "adls_sp": {"conn_type": "adls", "host": "acct", "login": "client-1", "password": "secret-1",
                    "extra": {"tenant_id": "tenant-1"}},
        "gcp": {"conn_type": "google_cloud_platform", "extra": {"keyfile_dict": {"type": "service_account"}}},
        "gcp_path": {"conn_type": "google_cloud_platform", "extra": {"key_path": "/secrets/sa.json"}},
    }
    for name, conn in conns.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{name.upper()}", json.dumps(conn))
    got = {name: MemWalHook.from_connection(BaseHook.get_connection(name)) for name in conns}
    assert got["s3c"] == (None, {"aws_access_key_id": "AKIAX", "aws_secret_access_key": "sk-1",
                                 "aws_session_token": "tok-1", "aws_region": "eu-west-1",
                                 "aws_endpoint": "http://127.0.0.1:9000", "allow_http": "true"})
    assert got["wasb_key"] == ("az://c/t", {"azure_storage_account_key": "a2V5", "azure_storage_account_name": "acct"})
    assert got["wasb_cs"][1] == {"azure_storage_account_name": "dev", "azure_storage_account_key": "a2V5",
                                 "azure_storage_endpoint": "http://127.0.0.1:10000/dev", "allow_http": "true"}
    assert got["wasb_sp"][1] == {"azure_storage_client_id": "client-1", "azure_storage_client_secret": "secret-1",
                                 "azure_storage_tenant_id": "tenant-1", "azure_storage_account_name": "acct",
                                 "azure_storage_endpoint": "https://acct.blob.core.windows.net"}
    assert got["adls_sp"][1] == {"azure_storage_client_id": "client-1", "azure_storage_client_secret": "secret-1",
                                 "azure_storage_tenant_id": "tenant-1", "azure_storage_account_name": "acct"}
    assert got["gcp"][1] == {"google_service_account_key": '{"type": "service_account"}'}
    assert got["gcp_path"][1] == {"google_service_account_path": "/secrets/sa.json"}
    from memwal.store.options import check_storage_options

    for _, options in got.values():
        check_storage_options(options)  # every key is one Lance knows


# -- DAG files -----------------------------------------------------------------------------
def dagbag():
    from airflow.models import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_dag_files_import_without_config(monkeypatch):
    monkeypatch.delenv("MEMWAL_CONFIG", raising=False)
    bag = dagbag()
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == ["memwal_maintenance"]
    dag = bag.dags["memwal_maintenance"]
    assert [t.task_id for t in dag.topological_sort()] == [
        "route", "maintenance", "merge", "catchup", "compact", "gc", "snapshot"]
    assert dag.get_task("route").downstream_task_ids == {"maintenance", "merge"}
    assert all("storage_options" not in t.template_fields for t in dag.tasks)
    assert dag.params["expire_versions"] == 7 * 24 * 3600  # GC frees storage by default


def test_dag_files_import_with_a_two_table_config(monkeypatch, tmp_path):
    config = tmp_path / "memwal.yaml"
    config.write_text(
        "defaults:\n  engine: spark\n  spark: {conf: {spark.executor.memory: 2g}}\n"
        "  gc: {grace_seconds: 900}\n  pool: memwal\n  priority_weight: 5\n"
        "tables:\n"
        "  - {name: events, table: s3://lake/events, conn_id: memwal_lake, schedule: '15 * * * *'}\n"
        "  - table: /data/users.lance\n    storage_options: {aws_region: us-east-1}\n    engine: local\n"
        "    jobs: [merge, gc]\n    lag: {max_unmerged_bytes: 1000, max_unmerged_generations: null}\n"
        "    queue: small\n"
    )
    monkeypatch.setenv("MEMWAL_CONFIG", str(config))
    bag = dagbag()
    assert bag.import_errors == {}
    # the lag DAG is opt-in (users asks for it; events does not: the fleet plans lag instead)
    assert sorted(bag.dag_ids) == ["memwal_events", "memwal_maintenance", "memwal_users", "memwal_users_lag"]
    events = bag.dags["memwal_events"]
    assert events.max_active_runs == 1
    # engine spark: the whole cycle is one spark-submit, each job's options as given
    assert [t.task_id for t in events.topological_sort()] == ["maintenance"]
    cycle = events.get_task("maintenance")
    assert cycle.engine == "spark" and cycle.spark_conf == {"spark.executor.memory": "2g"}
    assert cycle.jobs == ["merge", "catchup", "compact", "gc", "snapshot"]
    assert cycle.retries == 3 and cycle.retry_exponential_backoff == 2.0
    assert (cycle.pool, cycle.priority_weight) == ("memwal", 5)
    assert AssetAlias("memwal-merged:events") in cycle.outlets
    assert cycle.job_options["gc"] == {"grace_seconds": 900}  # versions expire after 7 days: the option's default
    assert events.timetable.expression == "15 * * * *"  # a cron is kept as written
    users = bag.dags["memwal_users"]
    assert [t.task_id for t in users.topological_sort()] == ["merge", "gc"]
    assert users.get_task("merge").engine == "local"
    assert (users.get_task("merge").queue, users.get_task("gc").pool) == ("small", "memwal")
    assert users.get_task("gc").job_options == {"grace_seconds": 900}
    assert users.get_task("gc").options("local").expire_versions == 7 * 24 * 3600
    lag = bag.dags["memwal_users_lag"]
    sensor = lag.get_task("wait_for_lag")
    assert isinstance(sensor, MergeLagSensor) and sensor.deferrable and sensor.soft_fail
    assert sensor.max_unmerged_bytes == 1000 and sensor.max_unmerged_generations is None
    assert sensor.poke_interval == 30 and sensor.timeout == 240  # the lag defaults under what the entry gave
    assert lag.get_task("trigger_early_merge").trigger_dag_id == "memwal_users"
    assert lag.max_active_runs == 1

    config.write_text("tables:\n  - table: s3://a/t\n    engine: flink\n    gc: {grace: 1}\n")
    (error,) = dagbag().import_errors.values()
    assert "table t: tables[0].engine: 'flink' is not one of ['local', 'spark', 'ray']" in error
    assert "tables[0].gc: Additional properties are not allowed ('grace' was unexpected)" in error
    assert "(schema memwal_tables.schema.json)" in error and str(config) in error
    config.write_text("tables:\n  - table: s3://a/t\n    gc: {grace_seconds: .nan}\n")
    bad = dagbag()
    assert any("gc: grace_seconds" in e and "not a finite number" in e for e in bad.import_errors.values())
    config.write_text("tables:\n  - table: s3://a/t\n    gc: {expire_versions: null}\n    engine: local\n")
    keep_all = dagbag().dags["memwal_t"].get_task("gc")
    assert keep_all.options("local").expire_versions is None
    # what every table shares failing fails the file
    config.write_text("defaults: {engine: flink}\ntables: [s3://a/t]\n")
    (error,) = dagbag().import_errors.values()
    assert "defaults.engine: 'flink' is not one of" in error and "memwal_t" not in dagbag().dag_ids


def json_lines(out: str):
    """The JSON document of an ``airflow ... -o json`` output (Python warnings may print first)."""
    return json.loads(next(line for line in out.splitlines() if line.startswith("[")))


def test_a_bad_table_entry_fails_only_its_own_dag(airflow_env, monkeypatch, tmp_path):
    """One typo in one table's entry is an import error naming that table; every other table's
    DAG stays. Checked in the DagBag and, after the DAG processor stored the file's DAGs, by
    ``airflow dags list-import-errors`` and ``airflow dags list``."""
    config = tmp_path / "memwal.yaml"
    config.write_text("tables:\n  - s3://lake/events\n  - {table: s3://lake/users, merge: {max_generation: 3}}\n"
                      "  - {table: s3://lake/orders, gc: {grace_seconds: -1}}\n  - s3://lake/audit\n")
    monkeypatch.setenv("MEMWAL_CONFIG", str(config))
    bag = dagbag()
    assert {"memwal_events", "memwal_audit"} <= set(bag.dag_ids)
    assert not {"memwal_users", "memwal_orders"} & set(bag.dag_ids)
    (error,) = bag.import_errors.values()
    assert "table users: tables[1].merge: Additional properties are not allowed ('max_generation' was " in error
    assert "table orders: tables[2]: gc: grace_seconds" in error and "memwal_tables.py" in next(iter(bag.import_errors))

    env = {**airflow_env[0], "MEMWAL_CONFIG": str(config)}
    assert airflow_cli(env, "dags", "reserialize").returncode == 0  # what the DAG processor stores
    (stored,) = json_lines(airflow_cli(env, "dags", "list-import-errors", "-o", "json").stdout)
    assert stored["filepath"] == "memwal_tables.py" and "table users: tables[1].merge" in stored["error"]
    listed = {d["dag_id"] for d in json_lines(airflow_cli(env, "dags", "list", "-o", "json").stdout)}
    assert {"memwal_events", "memwal_audit"} <= listed and not {"memwal_users", "memwal_orders"} & listed


def test_a_task_parses_only_its_own_table(monkeypatch, tmp_path):
    """Airflow's parsing context: a task of ``memwal_users`` builds ``memwal_users`` (and its lag
    DAG) only; its start does not pay for the other tables, nor fail on their typos."""
    config = tmp_path / "memwal.yaml"
    entries = "".join(f"  - s3://lake/t{i}\n" for i in range(50))
    config.write_text(f"tables:\n{entries}  - {{table: s3://lake/users, lag: {{max_unmerged_generations: 8}}}}\n"
                      "  - {table: s3://lake/typo, engine: flink}\n")
    monkeypatch.setenv("MEMWAL_CONFIG", str(config))
    assert len(dagbag().dag_ids) == 53  # 50 + users + its lag DAG + the ad-hoc DAG; the bad one aside
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "memwal_users")
    bag = dagbag()
    assert sorted(d for d in bag.dag_ids if d.startswith("memwal_users")) == ["memwal_users", "memwal_users_lag"]
    assert not any(d.startswith("memwal_t") for d in bag.dag_ids) and bag.import_errors == {}


def test_schedules_are_spread_by_a_stable_hash_of_the_name():
    from memwal.airflow.tables_config import jittered

    hourly = {jittered("@hourly", f"t{i}") for i in range(1000)}
    assert len({s.split()[0] for s in hourly}) == 60  # every minute of the hour is used
    assert jittered("@hourly", "events") == jittered("@hourly", "events") != jittered("@hourly", "users")
    minute, hour, *rest = jittered("@daily", "events").split()
    assert 0 <= int(minute) < 60 and 0 <= int(hour) < 24 and rest == ["*", "*", "*"]
    assert jittered("15 * * * *", "events") == "15 * * * *" and jittered(None, "events") is None


# -- operators ----------------------------------------------------------------------------
def test_operators_local_engine_full_cycle_and_asset_only_on_commit(make_table, monkeypatch):
    table, model = make_table()
    monkeypatch.setenv(
        "AIRFLOW_CONN_MEMWAL_T",
        json.dumps(
            {"conn_type": "memwal", "host": table.uri, "extra": {"storage_options": {"aws_session_token": SECRET}}}
        ),
    )
    ctx = context()
    doc = MemWalMergeOperator(task_id="merge", memwal_conn_id="memwal_t", max_generations=3).execute(ctx)
    assert doc["version"] == table.manifest().version and progress(table) == {s: 3 for s in shard_ids_for(SMALL)}
    assert json.loads(json.dumps(doc)) == doc  # XCom-able
    (event,) = alias_events(ctx)
    assert event.dest_asset_key.uri == table_asset(table.uri).uri and event.extra["version"] == doc["version"]

    doc = MemWalMergeOperator(task_id="merge", table=table.uri).execute(ctx)
    assert {s["from_generation"] for s in doc["shards"]} == {4} and len(alias_events(ctx)) == 2
    nothing = MemWalMergeOperator(task_id="merge", table=table.uri).execute(ctx)
    assert nothing["version"] is None and len(alias_events(ctx)) == 2  # nothing merged: no event
    plan = MemWalMergeOperator(task_id="merge", table=table.uri, dry_run=True).execute(ctx)
    assert plan["dry_run"] is True and len(alias_events(ctx)) == 2

    catchup = MemWalCatchupOperator(task_id="catchup", table=table.uri).execute(ctx)
    assert catchup["all_recorded"] is True
    snap = MemWalSnapshotOperator(task_id="snapshot", table=table.uri).execute(ctx)
    assert snap["version"] == table.manifest().version
    gc = MemWalGcOperator(task_id="gc", table=table.uri, grace_seconds=0, writer_idle_seconds=0,
                          expire_versions=0).execute(ctx)
    assert len(gc["deleted"]) == 12 and gc["blocked"] == []
    assert table_rows(table) == model.sorted_rows()


def test_operator_failures_are_one_clear_line(make_table, tmp_path):
    with pytest.raises(AirflowFailException, match="bad input: .*no Lance table"):
        MemWalMergeOperator(task_id="m", table=str(tmp_path / "nope")).execute(context())
    with pytest.raises(AirflowFailException, match="unknown engine 'flink'"):
        MemWalGcOperator(task_id="g", table=str(tmp_path / "nope"), engine="flink").execute(context())

    table, model = make_table()
    # (the catch-up lease: a merge would first wait up to 30 s for a live merge lease holder)
    with Lease(table.store, "catchup"):
        with pytest.raises(AirflowException, match="memwal catchup .*: lost or contended lease: .*catchup") as held:
            MemWalCatchupOperator(task_id="c", table=table.uri).execute(context())
    assert not isinstance(held.value, AirflowFailException)  # retried by Airflow

    victim = shard_ids_for(SMALL)[0]
    st = all_shard_manifests(table.store)[victim]
    gen2 = Path(table.uri, st.generation_key(st.generation(2)))
    gen2.rename(gen2.with_name("moved-away"))
    ctx = context()
    with pytest.raises(AirflowException, match=f"merge .*: shard {victim} stopped at generation 2: missing"):
        MemWalMergeOperator(task_id="m", table=table.uri).execute(ctx)
    partial = ctx["ti"].xcom["return_value"]
    assert partial["blocked"][0]["shard_id"] == victim and partial["version"] is not None
    assert progress(table)[victim] == 1


def test_merge_operator_spark_engine_through_spark_submit(make_table, monkeypatch):
    table, model = make_table()
    ctx = context()
    op = MemWalMergeOperator(
        task_id="merge",
        table=table.uri,
        max_generations=3,
        spark_conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"},
        storage_options={"aws_session_token": SECRET},
        **spark_local(monkeypatch),
    )
    doc = op.execute(ctx)
    assert doc["engine"] == "spark" and doc["version"] == table.manifest().version
    assert {(s["from_generation"], s["to_generation"]) for s in doc["shards"]} == {(1, 3)}
    assert progress(table) == {s: 3 for s in shard_ids_for(SMALL)}
    assert len(alias_events(ctx)) == 1
    assert memwal.open(table.uri).merge().ok
    assert table_rows(table) == model.sorted_rows()


# -- sensors and the trigger ----------------------------------------------------------------
def test_sensors_poke(make_table):
    table, _ = make_table()
    shard = shard_ids_for(SMALL)[0]
    fired = MergeLagSensor(task_id="lag", table=table.uri, max_unmerged_generations=12).poke({})
    assert fired and fired.xcom_value["unmerged_generations"] == 12 and fired.xcom_value["reasons"]
    assert not MergeLagSensor(task_id="lag", table=table.uri, max_unmerged_generations=13).poke({})
    assert MergeLagSensor(task_id="lag", table=table.uri, max_unmerged_bytes=1).poke({})
    assert MergeLagSensor(task_id="lag", table=table.uri, max_oldest_age_seconds=0).poke({})
    assert not MergeLagSensor(task_id="lag", table=table.uri, max_oldest_age_seconds=3600).poke({})

    merged = MergedGenerationSensor(task_id="m", table=table.uri, shard_id=shard, generation="3")
    indexed = MergedGenerationSensor(task_id="m", table=table.uri, shard_id=shard, generation=3, indexes=["id_idx"])
    assert not merged.poke({})
    assert memwal.open(table.uri).merge(max_generations=3).ok
    done = merged.poke({})
    assert done and done.xcom_value["merged_generation"] == 3
    assert not MergedGenerationSensor(task_id="m", table=table.uri, shard_id=shard, generation=4).poke({})
    assert not indexed.poke({})
    assert memwal.open(table.uri).catchup().ok
    assert indexed.poke({}).xcom_value["index_catchup"] == {"id_idx": 3}
    assert not MergeLagSensor(task_id="lag", table=table.uri, max_unmerged_generations=4).poke({})

    with pytest.raises(AirflowFailException, match="no shard 'nope'"):
        MergedGenerationSensor(task_id="m", table=table.uri, shard_id="nope", generation=1).poke({})
    with pytest.raises(ValueError, match="at least one threshold"):
        MergeLagSensor(task_id="lag", table=table.uri)


async def first_event(trigger: MemWalStatusTrigger, timeout: float = 60):
    gen = trigger.run()
    try:
        return await asyncio.wait_for(gen.__anext__(), timeout)
    finally:
        await gen.aclose()


def test_deferrable_sensor_defers_and_its_trigger_fires_after_a_merge(make_table, monkeypatch):
    table, _ = make_table()
    shard = shard_ids_for(SMALL)[1]
    monkeypatch.setenv("AIRFLOW_CONN_MEMWAL_D", json.dumps({"conn_type": "memwal", "host": table.uri}))
    sensor = MergedGenerationSensor(
        task_id="durable",
        memwal_conn_id="memwal_d",
        shard_id=shard,
        generation=2,
        deferrable=True,
        poke_interval=0.2,
        timeout=120,
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    assert deferred.value.method_name == "execute_complete"
    trigger = deferred.value.trigger
    assert isinstance(trigger, MemWalStatusTrigger)

    # what the triggerer does: rebuild from the serialized form, then run it
    path, kwargs = trigger.serialize()
    module, name = path.rsplit(".", 1)
    rebuilt = getattr(__import__(module, fromlist=[name]), name)(**kwargs)
    assert kwargs["storage_options"] == {} and kwargs["memwal_conn_id"] == "memwal_d"

    polls: list[str] = []

    def merge_after_the_first_poll(name: str) -> None:
        if name == "trigger.not-yet":
            polls.append(name)
            if len(polls) == 1:  # the condition was not met: now the merge lands
                assert memwal.open(table.uri).merge(max_generations=2).ok

    with steps.hooked(merge_after_the_first_poll):
        event = asyncio.run(first_event(rebuilt))
    assert polls == ["trigger.not-yet"]  # it polled, waited, polled again and fired
    assert event.payload["status"] == "success" and event.payload["result"]["merged_generation"] == 2
    assert sensor.execute_complete({}, event.payload)["shard_id"] == shard

    # already true: no deferral at all; errors come back as events and fail the sensor
    lag = MergeLagSensor(task_id="lag", table=table.uri, max_unmerged_generations=1, deferrable=True)
    assert lag.execute({})["unmerged_generations"] == 6
    lag_event = asyncio.run(
        first_event(MemWalStatusTrigger(condition=lag.condition(), table=table.uri, poke_interval=0.1))
    )
    assert lag_event.payload["result"]["unmerged_generations"] == 6
    bad = asyncio.run(first_event(MemWalStatusTrigger(condition=lag.condition(), table=table.uri + "-nope")))
    assert bad.payload["status"] == "error" and "no Lance table" in bad.payload["message"]
    with pytest.raises(AirflowException, match="no Lance table"):
        lag.execute_complete({}, bad.payload)


# -- hook, secrets, registration ---------------------------------------------------------------
def test_hook_connection_and_masking(make_table, monkeypatch):
    from airflow.sdk._shared.secrets_masker import redact

    table, _ = make_table()
    monkeypatch.setenv(
        "AIRFLOW_CONN_MEMWAL_H",
        json.dumps(
            {
                "conn_type": "memwal",
                "host": table.uri,
                "login": "AKIAEXAMPLEKEY",
                "password": "pw-1a2b3c4d5e6f",
                "extra": {"storage_options": {"aws_region": "us-east-1", "aws_session_token": "tok-9f8e7d6c5b4a"}},
            }
        ),
    )
    hook = MemWalHook("memwal_h", storage_options={"allow_http": "true"})
    uri, options = hook.resolve()
    assert uri == table.uri
    assert options == {
        "aws_region": "us-east-1",
        "aws_session_token": "tok-9f8e7d6c5b4a",
        "allow_http": "true",
        "aws_access_key_id": "AKIAEXAMPLEKEY",
        "aws_secret_access_key": "pw-1a2b3c4d5e6f",
    }
    assert redact("token tok-9f8e7d6c5b4a and pw-1a2b3c4d5e6f") == "token *** and ***"
    assert "us-east-1" in redact("region us-east-1")  # not a credential
    ok, message = hook.test_connection()
    assert ok and "3 shards" in message
    assert MemWalHook(table="/nope").test_connection()[0] is False
    assert MemWalHook.get_ui_field_behaviour()["relabeling"]["host"] == "Table URI"


def test_the_shipped_config_schemas_are_generated_from_the_models_and_accept_the_examples():
    import yaml
    from memwal.airflow.config_schema import FLEET_SCHEMA_NAME, SCHEMAS, config_problems

    for name, (path, build) in SCHEMAS.items():
        assert json.loads(path.read_text()) == build(), f"{name} is stale: run `make schema`"
    assert config_problems(yaml.safe_load((DAGS / "memwal_tables.example.yaml").read_text())) == []
    for example in ("memwal_fleet.example.yaml", "memwal_fleet.local.yaml"):
        assert config_problems(yaml.safe_load((DAGS / example).read_text()), FLEET_SCHEMA_NAME) == [], example
    assert config_problems({"tables": [{"table": "s3://a/t", "merge": {"max_generations": "x", "shard": ["a"]}}]}) == [
        "tables[0].merge: Additional properties are not allowed ('shard' was unexpected)"]


def test_registered_as_plugin_and_provider(airflow_env):
    from importlib.metadata import entry_points

    import airflow
    import jsonschema

    (plugin_ep,) = [e for e in entry_points(group="airflow.plugins") if e.name == "memwal"]
    plugin = plugin_ep.load()
    assert plugin.__name__ == "MemWalPlugin" and plugin.name == "memwal"
    assert plugin.macros[0]("s3://lake/events") == "memwal+s3://lake/events"
    (provider_ep,) = [e for e in entry_points(group="apache_airflow_provider") if e.value.startswith("memwal.airflow")]
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(provider_ep.load()(), schema)

    # what an installed Airflow sees (a subprocess: the repository root is not on its sys.path)
    env, _ = airflow_env
    plugins = json.loads(airflow_cli(env, "plugins", "-o", "json").stdout)
    (memwal,) = [p for p in plugins if p["name"] == "memwal"]
    assert memwal["source"].startswith("memwal-jobs==") and "memwal.airflow.plugin.asset_uri" in memwal["macros"]
    hooks = json.loads(airflow_cli(env, "providers", "hooks", "-o", "json").stdout)
    (hook,) = [h for h in hooks if h["connection_type"] == "memwal"]
    assert hook["class"] == "memwal.airflow.hooks.MemWalHook" and hook["package_name"] == "memwal-jobs"

    # The connection form shows what the hook reads: host (the table URI), login and
    # password (an S3 key pair), extra; Airflow's own schema accepts the hook's spelling.
    read = ("import json; from airflow.providers_manager import ProvidersManager; "
            "print(json.dumps(ProvidersManager().field_behaviours['memwal']))")
    proc = subprocess.run([sys.executable, "-c", read], env=env, cwd=str(env["AIRFLOW_HOME"]), capture_output=True,
                          text=True, timeout=300)
    form = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(form["hidden_fields"]) == ["port", "schema"]
    assert form["relabeling"] == {"host": "Table URI", "login": "AWS access key id",
                                  "password": "AWS secret access key"}
    page = (ROOT / "docs" / "operations" / "airflow.md").read_text()
    assert all(f"**{label}**" in page for label in form["relabeling"].values())  # the Airflow page's words
    behaviour = MemWalHook.get_ui_field_behaviour()
    assert behaviour["hidden_fields"] == form["hidden_fields"] and behaviour["relabeling"] == form["relabeling"]
    jsonschema.validate(behaviour, json.loads(
        (Path(airflow.__file__).parent / "customized_form_field_behaviours.schema.json").read_text()))


def test_operator_options_are_the_cli_flags_of_the_spark_jobs():
    """What an operator hands to spark-submit parses, with the CLI's own parser, back to
    exactly the options the operator was given (both derive from one options class)."""
    from memwal.actions import ACTIONS
    from memwal.cli import build_parser
    from memwal.cli.options import from_namespace

    ops = [
        MemWalMergeOperator(task_id="m", table="t", shards=["a", "b"], max_generations=2, max_rows=9, max_bytes=7),
        MemWalCatchupOperator(task_id="c", table="t", indexes=["id_idx"], max_deltas=3, max_unindexed_fraction=0.2),
        MemWalCompactOperator(task_id="k", table="t", target_rows_per_fragment=5, max_fragments=2),
        MemWalSnapshotOperator(task_id="s", table="t", lease_ttl=30),
        MemWalGcOperator(
            task_id="g", table="t", grace_seconds=5, expire_versions=6, orphans=True, orphan_age_seconds=7, audit=True
        ),
    ]
    parser = build_parser()
    for op in ops:
        given = op.options("spark")
        argv = [op.action, "T", *given.to_argv(), "--engine", "spark"]
        parsed = from_namespace(ACTIONS[op.action].options, parser.parse_args(argv))
        assert parsed == given, op.action
    assert ops[0].options("spark").shards == ("a", "b") and ops[4].options("spark").audit is True


def spark_local(monkeypatch) -> dict[str, Any]:
    """A ``spark_local`` connection (local[2]) and spark-submit on the PATH: the real thing."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("PATH", f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    return {"engine": "spark", "spark_conn_id": "spark_local", "spark_env": {"PYSPARK_PYTHON": sys.executable}}


@pytest.mark.parametrize("case", ["bad-input", "lease-held"])
def test_spark_engine_failures_come_from_the_result_file(make_table, tmp_path, monkeypatch, case):
    """A job that fails under spark-submit says why in its result file (error, exit code):
    bad input fails the task for good, a held lease lets Airflow retry; nothing is read
    from the log, and the storage options' file is gone afterwards."""
    if case == "bad-input":
        uri, held = str(tmp_path / "nope"), contextlib.nullcontext()
        exc, needle = AirflowFailException, r"memwal merge .*nope: bad input: .*no Lance table"
    else:
        table, _ = make_table()
        uri, held = table.uri, Lease(table.store, "merge", holder="other-merger")
        exc, needle = AirflowException, r"memwal merge .*: lost or contended lease: .*other-merger"
    # This test's own temporary folder: another test (or a second `make test` beside this one)
    # makes and removes memwal-merge-* folders of its own in the machine's /tmp meanwhile.
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    leftovers = lambda: set(private.glob("memwal-merge-*"))  # noqa: E731
    before = leftovers()
    op = MemWalMergeOperator(task_id="m", table=uri, lease_wait=0, storage_options={"aws_session_token": SECRET},
                             **spark_local(monkeypatch))
    with held, pytest.raises(exc, match=needle) as raised:
        op.execute(context())
    assert exc is AirflowFailException or not isinstance(raised.value, AirflowFailException)
    assert SECRET not in str(raised.value)
    assert leftovers() == before


def test_spark_job_arguments_carry_no_secret():
    """spark-submit's command line is readable by every local user: the storage options go
    in a 0600 file whose path is the only thing on it."""
    from memwal.airflow.spark_jobs import application_args

    args = application_args("/t", "/private/options.json", "/private/result.json", ["--max-generations", "2"])
    assert args == ["/t", "--max-generations", "2", "--storage-options-file", "/private/options.json",
                    "--result-file", "/private/result.json"]
