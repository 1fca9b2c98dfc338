"""Events instead of polling, end to end on moto's S3 and SQS.

The bucket's event notifications go to an SQS queue, filtered to the suffix ``.binpb`` (a shard
manifest: one per flush). A writer (pylance's ShardWriter) flushes to one table of three; moto
delivers the notifications; the DAG's own trigger (common-messaging's ``MessageQueueTrigger``,
scheme ``sqs``: the Amazon provider's ``SqsSensorTrigger``, run here on its event loop as the
triggerer runs it) turns them into one event whose payload names the written table alone; the
plan task of the run that event triggers plans that table only (the other tables cost no
request) and the mapped task merges it to its writer's rows. A scheduled run, the safety net,
plans every table. The DAG file schedules on the events or the cron.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import unquote_plus

import pytest
from airflow.sdk import Asset

from memwal.demo import Workload, create_base_table, write_generations
from memwal.table import open_table
from tests.conftest import table_rows
from tests.integration.test_airflow_fleet import context as task_context

WL = Workload(base_rows=120, shards=2, generations=1, rows_per_generation=10, seed=4, indexes=False)


def sqs(server: Any) -> Any:
    import boto3

    return boto3.client("sqs", endpoint_url=server.endpoint, aws_access_key_id="testing",
                        aws_secret_access_key="testing", region_name="us-east-1")


@pytest.fixture
def fleet(s3_server, tmp_path, monkeypatch) -> dict[str, Any]:
    """Three idle tables, the bucket's notifications of shard manifests on an SQS queue, and a
    fleet config with its state in the bucket and events on the queue."""
    first, opts = s3_server.new_table("lake/t0")
    bucket = s3_server.last_bucket
    root = first.rsplit("/", 1)[0]
    models = {}
    for i in range(3):
        uri = f"{root}/t{i}"
        models[uri] = create_base_table(uri, WL, opts)[1]
    queue = sqs(s3_server).create_queue(QueueName=f"memwal-fleet-{bucket}")["QueueUrl"]
    arn = sqs(s3_server).get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3_server.client().put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={
        "QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*"], "Filter": {"Key": {
            "FilterRules": [{"Name": "prefix", "Value": "lake/"}, {"Name": "suffix", "Value": ".binpb"}]}}}]})
    while sqs(s3_server).receive_message(QueueUrl=queue, WaitTimeSeconds=0).get("Messages"):
        pass  # moto's test event, and nothing else yet
    creds = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    monkeypatch.setenv("AIRFLOW_CONN_LAKE", json.dumps({"conn_type": "aws", "login": "testing", "password": "testing",
                                                        "extra": {"endpoint_url": s3_server.endpoint,
                                                                  "region_name": "us-east-1"}}))
    public = {k: v for k, v in opts.items() if k not in creds}
    config = tmp_path / "fleet.yaml"
    config.write_text(json.dumps({
        "sources": [{"source": root, "conn_id": "lake", "storage_options": public}], "schedule": "0 */6 * * *",
        "state": {"uri": f"s3://{bucket}/_memwal_fleet", "conn_id": "lake", "storage_options": public},
        "events": {"queue": queue, "conn_id": "lake", "region": "us-east-1", "poll_seconds": 1, "wait_seconds": 1},
        "budget": {"tables_per_task": 5}}))
    monkeypatch.setenv("MEMWAL_FLEET_CONFIG", str(config))
    return {"root": root, "opts": opts, "models": models, "queue": queue, "bucket": bucket, "config": config}


def context(events: Any = None) -> dict[str, Any]:
    """A task's context, with the asset events that triggered its DAG run."""
    return {**task_context(), "triggering_asset_events": events or {}}


def trigger_event(config: Path) -> dict[str, Any]:
    """The DAG's own trigger, run as the triggerer runs it, until it fires once."""
    from memwal.airflow.fleet import load_fleet_config
    from memwal.airflow.fleet_events import writes_asset

    asset = writes_asset(load_fleet_config(str(config)).events)
    (watcher,) = asset.watchers
    classpath, kwargs = watcher.trigger.serialize()
    assert classpath.endswith("SqsSensorTrigger"), classpath  # what the triggerer runs, from the serialized DAG

    async def first() -> Any:
        async for event in watcher.trigger.run():
            return event
        return None

    event = asyncio.run(asyncio.wait_for(first(), timeout=120))
    assert event is not None and event.payload["status"] == "success"
    return {"from_trigger": True, "payload": event.payload}  # the asset event's extra (Trigger.submit_event)


def test_a_flush_wakes_the_fleet_for_that_table_alone(s3_server, fleet):
    from memwal.airflow.fleet_events import ASSET_NAME
    from memwal.airflow.fleet_operators import MemWalFleetOperator, MemWalFleetPlanOperator

    root, opts = fleet["root"], fleet["opts"]
    # the safety net (a scheduled run) plans every table: all idle, nothing to run
    scheduled = context()
    assert MemWalFleetPlanOperator(task_id="plan").execute(scheduled) == []
    assert scheduled["ti"].xcom["fleet"]["discovered"] == 3 and scheduled["ti"].xcom["fleet"]["events"] is None

    written = f"{root}/t1"
    fleet["models"][written] = write_generations(written, WL, fleet["models"][written], storage_options=opts)
    extra = trigger_event(fleet["config"])
    keys = [unquote_plus(json.loads(m["Body"])["Records"][0]["s3"]["object"]["key"])
            for m in extra["payload"]["message_batch"]]
    assert keys and all(k.startswith("lake/t1/_mem_wal/") and k.endswith(".binpb") for k in keys)  # manifests only

    asset = Asset(name=ASSET_NAME, uri="memwal+sqs://queue")
    woken = context({asset: [SimpleNamespace(extra=extra)]})
    mark = len(s3_server.requests)
    (chunk,) = MemWalFleetPlanOperator(task_id="plan").execute(woken)
    used = [p for _, p in s3_server.requests[mark:]]
    assert woken["ti"].xcom["fleet"]["events"] == 1 and woken["ti"].xcom["fleet"]["discovered"] == 1
    assert [w["table"] for w in chunk] == [written] and chunk[0]["jobs"][0] == "merge"
    others = [p for p in used if "/lake/t0" in p or "/lake/t2" in p or "lake%2Ft0" in p or "lake%2Ft2" in p]
    assert others == [], others  # the tables nobody wrote to cost nothing
    doc = MemWalFleetOperator(task_id="run_tables", work=chunk).execute(woken)
    assert [t["table"] for t in doc["tables"]] == [written] and doc["tables"][0]["status"] == "ok"
    assert table_rows(open_table(written, opts)) == fleet["models"][written].sorted_rows()


def test_the_dag_schedules_on_the_events_or_the_cron(fleet):
    from airflow.models import DagBag
    from airflow.sdk import AssetOrTimeSchedule

    from tests.helpers import ROOT

    bag = DagBag(dag_folder=str(ROOT / "dags" / "memwal_fleet.py"))
    assert bag.import_errors == {}
    schedule = bag.dags["memwal_fleet"].timetable
    assert isinstance(schedule, AssetOrTimeSchedule) or "AssetOrTime" in type(schedule).__name__
    assert sorted(bag.dag_ids) == ["memwal_fleet", "memwal_fleet_control"]
