"""The run history in the table's own store: one object per run, newest first by key.

``_mem_wal/_jobs/history/<inverted start time>-<job>-<run id>.json``: the start time is
inverted (``MAX - milliseconds``) so that a plain listing, which every store returns in key
order, yields the newest runs first and ``--limit N`` stops after N keys; the job in the key
lets ``--job`` filter without reading. A record is created with ``put_if_absent`` when the
run starts (``running``) and rewritten once with ``put_if_match`` when it ends, so it works on
every store the table can live on and a run that dies leaves its ``running`` record behind.
GC prunes records older than the retention it is given.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

from memwal.errors import MemWalError, NotFoundError
from memwal.history.record import RunRecord
from memwal.store import Store
from memwal.table.naming import JOBS_DIR

log = logging.getLogger(__name__)

HISTORY_PREFIX = f"{JOBS_DIR}/history/"
#: Largest start time a key can hold, in milliseconds (the year 5138).
_MAX_MS = 10**14 - 1
_KEY_RE = re.compile(r"^(\d{14})-([a-z_.-]+)-([0-9a-f]{1,64})\.json$")


def record_key(started_at: float, job: str, run_id: str) -> str:
    return f"{HISTORY_PREFIX}{_MAX_MS - int(started_at * 1000):014d}-{job}-{run_id}.json"


def _parse(key: str) -> tuple[float, str, str] | None:
    """(start time, job, run id) of a history key, None for anything else."""
    m = _KEY_RE.match(key.rsplit("/", 1)[-1])
    if m is None:
        return None
    return (_MAX_MS - int(m.group(1))) / 1000, m.group(2), m.group(3)


def begin(store: Store, record: RunRecord) -> str:
    """Write the record of a run that starts; returns the ETag to finish it with."""
    return store.put_if_absent(record_key(record.started_at, record.job, record.run_id), record.dumps())


def finish(store: Store, record: RunRecord, etag: str | None) -> None:
    """Rewrite the record with how the run ended (never raises: the history must not fail a job)."""
    key = record_key(record.started_at, record.job, record.run_id)
    try:
        if etag is None:
            store.put_if_absent(key, record.dumps())
        else:
            store.put_if_match(key, record.dumps(), etag)
    except (MemWalError, OSError) as exc:
        log.warning("could not record the end of %s run %s in %s: %s", record.job, record.run_id,
                    store.uri_for(key), exc)


def read_runs(store: Store, *, job: str | None = None, since: float | None = None,
              limit: int | None = None) -> Iterator[RunRecord]:
    """Runs newest first, optionally of one job and started at or after ``since``."""
    found = 0
    for key in store.list_keys(HISTORY_PREFIX):  # a year of runs: names only, newest first
        parsed = _parse(key)
        if parsed is None:
            continue
        started, kind, _run_id = parsed
        if since is not None and started < since:
            return  # keys are newest first: everything after this one is older
        if job is not None and kind != job:
            continue
        try:
            yield RunRecord.loads(store.get(key))
        except NotFoundError:
            continue  # pruned since the listing
        except (ValueError, TypeError) as exc:
            log.warning("skipping unreadable history record %s: %s", store.uri_for(key), exc)
            continue
        found += 1
        if limit is not None and found >= limit:
            return


def expired_history(store: Store, older_than: float, *, keep_run: str | None = None) -> list[str]:
    """Keys of the records of runs started before ``older_than`` (GC plans to delete them),
    never the record of run ``keep_run`` (a GC planning again under its own record)."""
    out = []
    for key in store.list_keys(HISTORY_PREFIX):
        parsed = _parse(key)
        if parsed is not None and parsed[0] < older_than and parsed[2] != keep_run:
            out.append(key)
    return out


__all__ = ["HISTORY_PREFIX", "begin", "expired_history", "finish", "read_runs", "record_key"]
