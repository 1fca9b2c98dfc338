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

The messages come from whoever can write to the bucket (and the queue), so each is input to
check, one record at a time (issue 56): a malformed message or record (a body nested past any
reader, ``Records`` that is no list, a bucket given as a list) is skipped and counted, and the
others are read (:func:`keys_of`); a key is taken only if it is a shard manifest
(``<table>/_mem_wal/<shard>/manifest/<name>.binpb``, no ``..``). The run's work is bounded
(:func:`event_discovery`): a table must lie under one of the config's sources; the tables an
earlier plan found (the probe cache's) come first, at most :data:`MAX_TABLES`; tables no plan
has found yet, which a flood of fake names would be, at most :data:`MAX_NEW_TABLES`. The rest
wait for the safety-net poll, counted.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus

if TYPE_CHECKING:
    from airflow.sdk import Asset, Context
    from memwal.airflow.fleet import Events, FleetConfig

    from memwal.fleet.sources import Discovery

log = logging.getLogger(__name__)

ASSET_NAME = "memwal_fleet_writes"
#: Most tables an earlier plan found that one run's events may plan (more: the rest wait for the safety-net poll).
MAX_TABLES = 10_000
#: Most tables no plan has found yet that one run's events may plan (each costs a listing; a
#: flood of fake names must not cost thousands of requests, nor crowd the real tables out).
MAX_NEW_TABLES = 100
#: Most table names one run's events are read for (the rest are counted, not kept).
MAX_NAMED = 100_000
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


def keys_of(message: Mapping[str, Any], malformed: list[str] | None = None) -> Iterator[tuple[str, str]]:
    """(bucket, key) of every S3 record of one SQS message (an S3 test event has none); a
    malformed message or record is skipped, and why appended to ``malformed``."""
    bad = malformed if malformed is not None else []
    body = _json(message.get("Body") or "{}")
    if isinstance(body, Mapping) and isinstance(body.get("Message"), str):  # through SNS: the S3 event is inside
        body = _json(body["Message"])
    if not isinstance(body, Mapping):
        bad.append("a message body that is not a JSON object")
        return
    records = body.get("Records")
    if records is None:
        return
    if not isinstance(records, list):
        bad.append("Records is not a list")
        return
    for record in records:
        s3 = record.get("s3") if isinstance(record, Mapping) else None
        bucket = s3.get("bucket") if isinstance(s3, Mapping) else None
        obj = s3.get("object") if isinstance(s3, Mapping) else None
        name = bucket.get("name") if isinstance(bucket, Mapping) else None
        key = obj.get("key") if isinstance(obj, Mapping) else None
        if isinstance(name, str) and isinstance(key, str):
            yield name, unquote_plus(key)
        else:
            bad.append("a record without s3.bucket.name and s3.object.key strings")


def _json(text: Any) -> Any:
    """A message's JSON text as a value (None: not JSON, or nested past any reader)."""
    from memwal.core.json_doc import JsonDocError, load_json

    if not isinstance(text, str | bytes):
        return None
    try:
        return load_json(text, max_values=1_000_000)
    except JsonDocError:
        return None


def table_of(bucket: str, key: str) -> str | None:
    """The table URI a shard manifest's key belongs to (None: not a shard manifest)."""
    m = _MANIFEST.match(key)
    if m is None or any(part in ("", ".", "..") for part in m.group("table").split("/")):
        return None
    return f"s3://{bucket}/{m.group('table')}"


def tables_of(context: Context) -> frozenset[str] | None:
    """The tables the asset events that triggered this run named (None: not triggered by
    this fleet's events: a scheduled or manual run, which plans every table). Malformed
    messages and records are skipped and counted (a warning), never fatal to the others."""
    found: set[str] = set()
    malformed: list[str] = []
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
            messages = payload.get("message_batch")
            for message in messages if isinstance(messages, list) else []:
                if not isinstance(message, Mapping):
                    malformed.append("a message that is not an object")
                    continue
                for bucket, key in keys_of(message, malformed):
                    table = table_of(bucket, key)
                    if table is not None and (len(found) < MAX_NAMED or table in found):
                        found.add(table)
    if malformed:
        log.warning("memwal fleet events: %d malformed messages or records skipped (first: %s)", len(malformed),
                    malformed[0])
    if not triggered:
        return None
    return frozenset(found)


def event_discovery(config: FleetConfig, named: frozenset[str], known: frozenset[str]) -> Discovery:
    """The tables an event run plans, with no listing (see the module docstring): of ``named``,
    those under a source of ``config`` (each checked against the source's roots), the ones in
    ``known`` (an earlier plan found them) first, at most :data:`MAX_TABLES`, then at most
    :data:`MAX_NEW_TABLES` others; the rest wait for the safety net (one skipped entry)."""
    from memwal.airflow.fleet import storage_options_of

    from memwal.fleet.sources import Discovery, Skipped, TableRef, source_of

    old = sorted(t for t in named if t in known)
    new = sorted(t for t in named if t not in known)
    refs: list[TableRef] = []
    options: dict[str, dict[str, str]] = {}  # a source's connection, asked once
    left = len(old[MAX_TABLES:]) + len(new[MAX_NEW_TABLES:])
    for uri in old[:MAX_TABLES] + new[:MAX_NEW_TABLES]:
        src = source_of([(s.source, s.properties) for s in config.sources], uri)
        if src is not None:
            if src not in options:
                options[src] = storage_options_of(config.source(src))
            refs.append(TableRef(uri, src, options[src]))
    skipped = (Skipped(f"{left:,} more tables the events named", f"over this run's bound ({MAX_TABLES:,} tables an "
                       f"earlier plan found, {MAX_NEW_TABLES} new): left to the next full plan"),) if left else ()
    return Discovery(tuple(refs), skipped, ())


__all__ = ["ASSET_NAME", "MAX_NEW_TABLES", "MAX_TABLES", "event_discovery", "keys_of", "table_of", "tables_of",
           "writes_asset"]
