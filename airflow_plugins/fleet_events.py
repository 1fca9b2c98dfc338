"""Events instead of polling: the fleet wakes for the tables that were written to.

An idle fleet should cost nothing between writes. Where the store announces new objects (S3
event notifications to an SQS queue, filtered to the suffix ``.binpb``: a writer's flush
writes one shard manifest, so a busy writer is one message per flush, not one per file), an
Airflow ``AssetWatcher`` with the common-messaging provider's ``MessageQueueTrigger`` (its
``sqs`` scheme: the Amazon provider's ``SqsSensorTrigger``, long-polling the queue in the
triggerer) turns the messages into an event on :func:`writes_asset`, and the ``memwal_fleet``
DAG, scheduled on that asset *or* its cron (``AssetOrTimeSchedule``), runs. The plan task of
such a run plans only the tables the messages named (:func:`tables_of`); the cron run plans
every table and stays the safety net: a missed or dropped message is caught at the next poll.

The messages come from whoever can write to the bucket (and the queue): a key is taken only
if it is a shard manifest (``<table>/_mem_wal/<shard>/manifest/<name>.binpb``, no ``..``), the
table must lie under one of the config's sources (the plan task checks), and at most
:data:`MAX_TABLES` tables are taken from one run's messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus

if TYPE_CHECKING:
    from airflow.sdk import Asset, Context
    from memwal.airflow.fleet import Events

ASSET_NAME = "memwal_fleet_writes"
#: Most tables one run's events name (more: the rest wait for the safety-net poll).
MAX_TABLES = 10_000
_MANIFEST = re.compile(r"^(?P<table>.+?)/_mem_wal/(?P<shard>[^/_][^/]*)/manifest/[^/]+\.binpb$")


def writes_asset(events: Events) -> Asset:
    """The asset the queue's messages become events on, watched by the triggerer."""
    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
    from airflow.sdk import Asset, AssetWatcher

    kwargs: dict[str, Any] = {"sqs_queue": events.queue, "aws_conn_id": events.conn_id,
                              "waiter_delay": events.poll_seconds, "wait_time_seconds": events.wait_seconds,
                              "max_messages": 10}
    if events.region:
        kwargs["region_name"] = events.region
    trigger = MessageQueueTrigger(scheme="sqs", **kwargs)
    return Asset(name=ASSET_NAME, uri=f"memwal+sqs://{events.queue.split('://', 1)[-1]}",
                 watchers=[AssetWatcher(name=f"{ASSET_NAME}_sqs", trigger=trigger)])


def keys_of(message: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    """(bucket, key) of every S3 record of one SQS message (an S3 test event has none)."""
    try:
        body = json.loads(message.get("Body") or "{}")
    except (TypeError, ValueError):
        return
    if not isinstance(body, Mapping):
        return
    if isinstance(body.get("Message"), str):  # delivered through SNS: the S3 event is inside
        try:
            body = json.loads(body["Message"])
        except ValueError:
            return
    for record in body.get("Records") or []:
        s3 = record.get("s3") if isinstance(record, Mapping) else None
        if isinstance(s3, Mapping):
            bucket, obj = s3.get("bucket") or {}, s3.get("object") or {}
            if isinstance(bucket.get("name"), str) and isinstance(obj.get("key"), str):
                yield bucket["name"], unquote_plus(obj["key"])


def table_of(bucket: str, key: str) -> str | None:
    """The table URI a shard manifest's key belongs to (None: not a shard manifest)."""
    m = _MANIFEST.match(key)
    if m is None or any(part in ("", ".", "..") for part in m.group("table").split("/")):
        return None
    return f"s3://{bucket}/{m.group('table')}"


def tables_of(context: Context) -> frozenset[str] | None:
    """The tables the asset events that triggered this run named (None: not triggered by
    this fleet's events: a scheduled or manual run, which plans every table)."""
    found: set[str] = set()
    triggered = False
    events = context.get("triggering_asset_events") if hasattr(context, "get") else None
    for asset, batch in (dict(events).items() if events else []):
        if getattr(asset, "name", None) != ASSET_NAME:
            continue
        for event in batch:
            extra = getattr(event, "extra", None) or {}
            payload = extra.get("payload") if isinstance(extra, Mapping) else None
            if not isinstance(payload, Mapping):
                continue
            triggered = True
            for message in payload.get("message_batch") or []:
                if isinstance(message, Mapping):
                    found.update(t for b, k in keys_of(message) if (t := table_of(b, k)) is not None)
    if not triggered:
        return None
    return frozenset(sorted(found)[:MAX_TABLES])


__all__ = ["ASSET_NAME", "keys_of", "table_of", "tables_of", "writes_asset"]
