"""Hostile records, as whoever can write a table's storage can plant them: run records and
checkpoint records whose every free-text field carries markup, script, CSS imports and
terminal escapes. Shared by the page tests (a file in Chromium) and the Airflow view's.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from memwal.checkpoint.record import record_key as checkpoint_key
from memwal.history.log import record_key
from tests.browser import Canary

#: Escapes that would retitle the terminal and clear its screen if printed raw.
TERMINAL = "\x1b]0;PWNED\x07\x1b[2J"


def payload(canary: Canary, tag: str) -> str:
    """Markup that, if it reached a page unescaped, would run script or fetch from ``canary``
    in five ways (script, event handlers on an image and an SVG, a style import), out of a
    text node, a double- or single-quoted attribute, a ``<title>`` or a ``<style>``."""
    return (f'"\'><script>fetch("{canary.url(tag + "-script")}")</script>'
            f'<img src="{canary.url(tag + "-img")}" onerror="fetch(\'{canary.url(tag + "-onerror")}\')">'
            f'<svg onload="fetch(\'{canary.url(tag + "-onload")}\')"></svg></title></style>'
            f'<style>@import url("{canary.url(tag + "-import")}");</style>{TERMINAL}')


def short_payload(canary: Canary, tag: str) -> str:
    """A payload that fits a checkpoint name (printable, at most 200 characters)."""
    return f'"><img src="{canary.url(tag)}"><script>fetch("{canary.url(tag + "-s")}")</script>'


def plant_record(uri: str, job: str, started_at: float, record: dict[str, Any]) -> Path:
    """Write a run record under a well-formed history key of ``job``."""
    path = Path(uri, record_key(started_at, job, uuid.uuid4().hex[:16]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def plant_hostile_history(uri: str, canary: Canary, now: float) -> int:
    """Records whose every text field is hostile, one per job, and two whose hostile field the
    model refuses (a job that is no name, an outcome that is none): those are skipped.
    Returns how many are skipped."""
    p = payload(canary, "run")
    base = {"run_id": p, "engine": p, "holder": p, "outcome": "ok", "started_at": now - 600,
            "finished_at": now - 590, "versions": [1], "error": p, "lag": {p: [1, 2, 3.5]}, "detail": False}
    plant_record(uri, "merge", now - 600, {
        **base, "job": "merge",
        "figures": {"shards": [{"shard_id": p, "from_generation": 1, "to_generation": 1, "rows_upserted": 1,
                                "rows_deleted": 0}], "rows_upserted": 1, "rows_deleted": 0, "generations": 1,
                    "blocked": 0, "reason": p, p: p}})
    plant_record(uri, "catchup", now - 500, {
        **base, "job": "catchup", "started_at": now - 500, "finished_at": now - 499,
        "figures": {"indexes": [{"index_name": p, "action": p, "recorded": False}]}})
    plant_record(uri, "gc", now - 400, {
        **base, "job": "gc", "started_at": now - 400, "finished_at": now - 399,
        "figures": {"generations": 1, "wal_entries": 1, "objects": 2, "bytes": 10, "blocked_by_reason": {p: 2},
                    "wait": {"gates": {p: 2}, "blocked": 2, "frees": p, "options": {"grace_seconds": p},
                             "passes": [{"gates": p, "count": 2, "passes_at": 1e300, "frees": p}, p]}}})
    plant_record(uri, "snapshot", now - 300, {
        **base, "job": "snapshot", "started_at": now - 300, "finished_at": now - 299,
        "figures": {"committed": False, "reason": p}})
    plant_record(uri, "merge", now - 200, {**base, "job": p, "started_at": now - 200, "finished_at": now - 199})
    plant_record(uri, "merge", now - 100, {**base, "job": "merge", "outcome": p, "started_at": now - 100,
                                           "finished_at": now - 99})
    return 2


def plant_hostile_checkpoint(uri: str, canary: Canary, now: float, version: int) -> str:
    """A live checkpoint record whose name is hostile; returns its id."""
    cid = uuid.uuid4().hex
    path = Path(uri, checkpoint_key(cid))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"id": cid, "name": short_payload(canary, "checkpoint"), "version": version,
                                "created_at": now - 60, "expires_at": now + 3600, "shards": {}, "format": 1}))
    return cid


__all__ = ["TERMINAL", "payload", "plant_hostile_checkpoint", "plant_hostile_history", "plant_record",
           "short_payload"]
