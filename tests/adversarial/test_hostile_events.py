"""Hostile events (issue 56, M5 and L2): whoever can write the bucket, or the queue, writes the
messages that wake the fleet.

On moto's S3: tables pylance's ShardWriter wrote, the fleet's state in the bucket, and the
asset events an SQS trigger hands the ``memwal_fleet`` DAG's plan task, as it hands them. One
malformed message or record (a body nested past any reader, ``Records`` that is no list, a
bucket given as a list, an SNS message that is a list) is skipped and counted, and the good
table in the same batch is planned; a flood of 10,000 fake table names plans every real table
first, and costs a bounded number of requests (10,006 before, 444 s on moto)."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import Asset

from memwal.demo import Workload, create_base_table, write_generations

TINY = Workload(base_rows=40, shards=1, generations=2, rows_per_generation=10, seed=5, indexes=False)


def message(bucket: str, *keys: str) -> dict[str, Any]:
    """An SQS message of S3's event notification for ``keys``."""
    return {"Body": json.dumps({"Records": [{"s3": {"bucket": {"name": bucket}, "object": {"key": k}}}
                                            for k in keys]})}


def manifest_key(table: str) -> str:
    return f"{table}/_mem_wal/0a1b2c3d/manifest/1000000000000000000000000000000000000000000000000000000000000000.binpb"


def woken(*messages: Any) -> dict[str, Any]:
    """The context of a DAG run the fleet's events triggered, with these messages."""
    from memwal.airflow.fleet_events import ASSET_NAME

    event = SimpleNamespace(extra={"from_trigger": True, "payload": {"status": "success",
                                                                      "message_batch": list(messages)}})
    return {"triggering_asset_events": {Asset(name=ASSET_NAME, uri="memwal+sqs://queue"): [event]}}


@pytest.fixture
def lake(s3_server, tmp_path, monkeypatch) -> dict[str, Any]:
    """Three tables with unmerged generations under one root on moto, and a fleet config
    with its state in the bucket."""
    first, opts = s3_server.new_table("lake/t0")
    bucket = s3_server.last_bucket
    root = first.rsplit("/", 1)[0]
    for i in range(3):
        uri = f"{root}/t{i}"
        write_generations(uri, TINY, create_base_table(uri, TINY, opts)[1], storage_options=opts)
    monkeypatch.setenv("AIRFLOW_CONN_LAKE", json.dumps({"conn_type": "aws", "login": "testing",
                                                        "password": "testing", "extra": {
                                                            "endpoint_url": s3_server.endpoint,
                                                            "region_name": "us-east-1"}}))
    public = {k: v for k, v in opts.items() if k not in ("aws_access_key_id", "aws_secret_access_key")}
    config = tmp_path / "fleet.yaml"
    config.write_text(json.dumps({
        "sources": [{"source": root, "conn_id": "lake", "storage_options": public}], "schedule": None,
        "state": {"uri": f"s3://{bucket}/_memwal_fleet", "conn_id": "lake", "storage_options": public}}))
    monkeypatch.setenv("MEMWAL_FLEET_CONFIG", str(config))
    return {"root": root, "bucket": bucket, "tables": [f"{root}/t{i}" for i in range(3)]}


def test_malformed_messages_and_records_are_skipped_counted_and_the_good_table_planned(lake, caplog):
    from memwal.airflow.fleet import load_fleet_config, plan
    from memwal.airflow.fleet_events import tables_of

    bucket, root = lake["bucket"], lake["root"]
    t1 = lake["tables"][1]
    prefix = root.split("/", 3)[3]
    good = message(bucket, manifest_key(f"{prefix}/t1"))
    bad_record = {"Body": json.dumps({"Records": [
        {"s3": {"bucket": {"name": [bucket]}, "object": {"key": manifest_key(f"{prefix}/t2")}}},
        {"s3": {"bucket": {"name": bucket}, "object": {"key": 5}}}, 5,
        {"s3": {"bucket": {"name": bucket}, "object": {"key": manifest_key(f"{prefix}/t1")}}}]})}
    batch = [{"Body": "[" * 200_000}, {"Body": json.dumps({"Records": 5})},
             {"Body": json.dumps({"Type": "Notification", "Message": json.dumps([message(bucket, "x")])})},
             {"Body": json.dumps({"Message": json.dumps({"Records": {"s3": 1}})})}, 5, {"Body": 7}, good, bad_record]
    with caplog.at_level(logging.WARNING):
        named = tables_of(woken(*batch))
    assert named == frozenset({t1})
    assert any("9 malformed messages or records skipped" in r.getMessage() for r in caplog.records), caplog.text
    planned = plan(load_fleet_config(), only=named).plan
    assert [(t.table, t.jobs[0]) for t in planned.tables] == [(t1, "merge")]


def test_an_event_flood_of_fake_names_plans_the_real_tables_first_with_bounded_requests(lake, s3_server):
    from memwal.airflow.fleet import load_fleet_config, plan
    from memwal.airflow.fleet_events import MAX_NEW_TABLES, tables_of

    bucket, root, real = lake["bucket"], lake["root"], lake["tables"]
    prefix = root.split("/", 3)[3]
    config = load_fleet_config()
    assert sorted(t.table for t in plan(config).plan.tables) == real  # the safety net found them
    fakes = [manifest_key(f"{prefix}/fake{i:05d}") for i in range(10_000)]
    named = tables_of(woken(*[message(bucket, *fakes[i:i + 1000]) for i in range(0, 10_000, 1000)],
                            message(bucket, *[manifest_key(t.split("/", 3)[3]) for t in real])))
    assert named is not None and len(named) == 10_003 and sorted(named)[:3] != real  # sorted, fakes come first
    mark = len(s3_server.requests)
    planned = plan(config, only=named).plan
    sent = len(s3_server.requests) - mark
    print(f"10,000 fake names and 3 real tables: {sent} requests", flush=True)
    assert sorted(t.table for t in planned.tables) == real and all(t.jobs[0] == "merge" for t in planned.tables)
    probed_fakes = [s for s in planned.skipped if "/fake" in s.path]
    assert len(probed_fakes) == MAX_NEW_TABLES  # not Lance tables: skipped, each a listing
    assert any("9,900 more tables the events named" in s.path for s in planned.skipped)
    assert sent < 3 * 10 + 2 * MAX_NEW_TABLES + 20, sent
