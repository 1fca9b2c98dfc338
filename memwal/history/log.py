"""The run history in the table's own store: one object per run, newest first by key.

``_mem_wal/_jobs/history/<inverted month>/<inverted start time>-<job>-<run id>.json``: the
month (UTC, ``99999 - (year * 12 + month - 1)``) and the start time (``MAX - milliseconds``)
are inverted so that plain listings, which every store returns in key order, yield the
newest runs first: ``--limit N`` and the status page's newest 200 runs list the newest month
folders only, whatever a year of history holds, and GC lists only the months that reach past
its retention (issue 23). Records written before the month folders lie directly under
``history/``; they are read and pruned with the others until they age out. The job in the key
lets ``--job`` filter without reading. A record is created with ``put_if_absent`` when the
run starts (``running``) and rewritten once with ``put_if_match`` when it ends, so it works on
every store the table can live on and a run that dies leaves its ``running`` record behind.
GC prunes records older than the retention it is given.

A record of a table with many shards would carry a list of shards (a merge's figures) and a
lag by shard, which the status page would parse for each run it draws
(docs/decisions/0016-history-records-summary-and-detail.md). Such a record keeps a summary
(counts and :func:`~memwal.history.record.lag_total`) and puts its per-shard parts in a detail
object next to it (``<record>.detail.json``, written first); :func:`read_runs` puts them back
unless asked for summaries only.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import math
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from memwal.core import clock as clocks
from memwal.errors import MemWalError, NotFoundError, TooLargeError
from memwal.history.record import NOTHING, OK, RunRecord
from memwal.history.schema import BadRecord
from memwal.store import Store
from memwal.table.naming import JOBS_DIR

log = logging.getLogger(__name__)

HISTORY_PREFIX = f"{JOBS_DIR}/history/"
#: Largest start time a key can hold, in milliseconds (the year 5138).
_MAX_MS = 10**14 - 1
_KEY_RE = re.compile(r"^(\d{14})-([a-z_.-]+)-([0-9a-f]{1,64})\.json$")
#: A record longer than this keeps its per-shard parts in its detail object.
DETAIL_BYTES = 16 * 1024
_DETAIL_SUFFIX = ".detail.json"
#: Largest record and detail object read (storage is untrusted: a larger one is skipped with a
#: warning, never loaded). A summary is at most a few KB; a detail is ~150 bytes a shard.
RECORD_MAX_BYTES = 1024 * 1024
DETAIL_MAX_BYTES = 32 * 1024 * 1024
#: A record dated more than this ahead of now is an anomaly (a writer's clock far off, or a
#: record planted to stay on top): views skip it and GC prunes it.
FUTURE_SKEW_SECONDS = 24 * 3600.0
#: Unreadable records a reader skips before it stops looking further back.
MAX_SKIPPED = 1000
#: GC records :func:`last_whole_gc` reads, newest first, looking for a whole run among listing
#: passes (a follower runs one every few seconds of merges, a whole GC every minute or more).
WHOLE_GC_LOOKBACK = 256


#: Largest month a folder name can hold (``year * 12 + month - 1``).
_MAX_MONTH = 99_999
_MONTH_RE = re.compile(r"^\d{5}$")


def record_key(started_at: float, job: str, run_id: str) -> str:
    ms = int(started_at * 1000)
    return f"{HISTORY_PREFIX}{_month_folder(ms)}/{_MAX_MS - ms:014d}-{job}-{run_id}.json"


def _month_folder(ms: int) -> str:
    at = datetime.fromtimestamp(ms / 1000, UTC)
    return f"{_MAX_MONTH - (at.year * 12 + at.month - 1):05d}"


def _month_start(folder: str) -> float:
    """When the month of a folder began (seconds since the epoch); -inf for a name no record
    key gives (year 0): its records are then listed and judged one by one."""
    months = _MAX_MONTH - int(folder)
    try:
        return datetime(months // 12, months % 12 + 1, 1, tzinfo=UTC).timestamp()
    except ValueError:
        return -math.inf


def _keys(store: Store, month: Callable[[str], bool] = lambda _: True) -> Iterator[str]:
    """Record and detail keys newest first: those of the month folders ``month`` accepts,
    each listed only when reached, merged with the records from before the folders (one
    listing finds those and the folders; links and other names are not ours: skipped)."""
    top, folders = store.list_level(HISTORY_PREFIX)
    nested = (k for m in folders if _MONTH_RE.match(m) and month(m)
              for k in store.list_keys(f"{HISTORY_PREFIX}{m}/"))
    return heapq.merge(top, nested, key=_name)


def _name(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def _parse(key: str) -> tuple[float, str, str] | None:
    """(start time, job, run id) of a history key, None for anything else."""
    m = _KEY_RE.match(key.rsplit("/", 1)[-1])
    if m is None:
        return None
    return (_MAX_MS - int(m.group(1))) / 1000, m.group(2), m.group(3)


def begin(store: Store, record: RunRecord) -> str:
    """Write the record of a run that starts; returns the ETag to finish it with."""
    return store.put_if_absent(record_key(record.started_at, record.job, record.run_id), record.dumps())


def detail_key(key: str) -> str:
    """Where the record at ``key`` keeps its per-shard parts, when it is a summary."""
    return key.removesuffix(".json") + _DETAIL_SUFFIX


def finish(store: Store, record: RunRecord, etag: str | None) -> None:
    """Rewrite the record with how the run ended (never raises: the history must not fail a job)."""
    key = record_key(record.started_at, record.job, record.run_id)
    try:
        if etag is not None and store.has_directories and store.head(key) is None:
            # gone since it began (its table removed meanwhile): on a disk a write would make the
            # removed table's folders again
            raise NotFoundError(f"the record is gone: {store.uri_for(key)}")
        data = record.dumps()
        if len(data) > DETAIL_BYTES:  # a summary that names its detail only once the detail exists
            store.put(detail_key(key), record.detail_dumps())
            data = record.summary().dumps()
        if etag is None:
            store.put_if_absent(key, data)
        else:
            store.put_if_match(key, data, etag)
    except (MemWalError, OSError) as exc:
        log.warning("could not record the end of %s run %s in %s: %s", record.job, record.run_id,
                    store.uri_for(key), exc)


def read_runs(store: Store, *, job: str | None = None, since: float | None = None,
              limit: int | None = None, detail: bool = True, now: float | None = None,
              skipped: list[str] | None = None) -> Iterator[RunRecord]:
    """Runs newest first, optionally of one job and started at or after ``since``; with
    ``detail=False``, a record kept as a summary is given as it is (no per-shard parts).

    Every record is size-capped and checked against the model (:mod:`memwal.history.schema`)
    as it is read; one that does not match, is larger than :data:`RECORD_MAX_BYTES`, names
    another job than its key, or is dated more than :data:`FUTURE_SKEW_SECONDS` ahead of
    ``now`` is skipped with a warning (and its reason appended to ``skipped``). After
    :data:`MAX_SKIPPED` of them the reader stops: planted records cannot make it read forever.
    """
    found = bad = 0
    future = (clocks.current()() if now is None else now) + FUTURE_SKEW_SECONDS
    for key in _keys(store):  # names only, newest first: the newest months are listed, not the year
        parsed = _parse(key)
        if parsed is None:
            continue
        started, kind, _run_id = parsed
        if since is not None and started < since:
            return  # keys are newest first: everything after this one is older
        if job is not None and kind != job:
            continue
        try:
            if started > future:
                raise BadRecord(f"dated {started - future + FUTURE_SKEW_SECONDS:,.0f} s in the future (an anomaly; "
                                "GC prunes it)")
            record = RunRecord.loads(store.get(key, max_bytes=RECORD_MAX_BYTES))
            if record.job != kind:
                raise BadRecord(f"job {record.job!r} differs from its key's {kind!r}")
            if detail and record.detail:
                record = _with_detail(store, key, record)
        except NotFoundError:
            continue  # pruned since the listing
        except (ValueError, TypeError, TooLargeError) as exc:
            bad += 1
            reason = str(exc) if isinstance(exc, TooLargeError) else f"{store.uri_for(key)}: {exc}"  # it names it
            log.warning("skipping history record %s", reason)
            if skipped is not None:
                skipped.append(reason)
            if bad >= MAX_SKIPPED:
                log.warning("stopped reading the history of %s after %d unreadable records", store.root, bad)
                return
            continue
        yield record
        found += 1
        if limit is not None and found >= limit:
            return


def last_whole_gc(store: Store, *, now: float | None = None) -> tuple[float, float] | None:
    """When the newest whole GC run (not a listing pass) finished, and the seconds it took (its plan
    included: the record's span is the run's after its plan), from the
    newest :data:`WHOLE_GC_LOOKBACK` GC records (None: none of them is a whole run that ended).

    A record anyone who writes the table's storage can write: the caller bounds what it does with
    the answer (a follower waits at most its ``gc_max_every`` for it). Records written before
    ``listed_only`` was a figure say nothing either way: they are passed over."""
    for record in read_runs(store, job="gc", limit=WHOLE_GC_LOOKBACK, detail=False, now=now):
        if record.figures.get("listed_only") is False and record.finished_at is not None \
                and record.outcome in (OK, NOTHING):
            planned = record.figures.get("plan_seconds") or 0.0
            return record.finished_at, max(0.0, record.finished_at - record.started_at) + planned
    return None


def _with_detail(store: Store, key: str, record: RunRecord) -> RunRecord:
    """The summary ``record`` made whole from its detail object (as it is if that is gone,
    too large or does not match the model)."""
    try:
        return record.with_detail(store.get(detail_key(key), max_bytes=DETAIL_MAX_BYTES))
    except (NotFoundError, ValueError, TypeError, TooLargeError) as exc:
        log.warning("history record %s without its detail: %s", store.uri_for(key), exc)
        return record


def with_details(keys: list[str]) -> list[str]:
    """The record ``keys`` and their detail objects (which exist only for summaries): what
    pruning the records deletes."""
    return [k for key in keys for k in (key, detail_key(key))]


def expired_history(store: Store, older_than: float, *, keep_run: str | None = None,
                    now: float | None = None) -> list[str]:
    """Keys of the records of runs started before ``older_than`` (GC plans to delete them),
    and of records dated more than :data:`FUTURE_SKEW_SECONDS` after ``now`` (anomalies that
    would otherwise stay on top for ever), never the record of run ``keep_run`` (a GC
    planning again under its own record).

    A month folder that began at or after ``older_than`` holds no expired record and is not
    listed (unless it lies in the anomalous future); in the others (and among the records
    from before the folders) the keys before the first one that may be older than
    ``older_than`` (its millisecond rounded so that no expired key falls before it) are not
    parsed, nor is any detail object, except the anomalies at the head of the order.
    """
    future = (clocks.current()() if now is None else now) + FUTURE_SKEW_SECONDS
    future_folder = _month_folder(int(future * 1000))
    keys = list(_keys(store, lambda m: _month_start(m) < older_than or m <= future_folder))
    names = [_name(k) for k in keys]
    first = bisect.bisect_left(names, f"{_MAX_MS - math.ceil(older_than * 1000):014d}")
    ahead = bisect.bisect_left(names, f"{_MAX_MS - math.floor(future * 1000):014d}", hi=first)
    out = []
    for key in keys[:ahead] + keys[first:]:
        if key.endswith(_DETAIL_SUFFIX):
            continue
        parsed = _parse(key)
        if parsed is not None and (parsed[0] < older_than or parsed[0] > future) and parsed[2] != keep_run:
            out.append(key)
    return out


__all__ = ["FUTURE_SKEW_SECONDS", "HISTORY_PREFIX", "RECORD_MAX_BYTES", "begin", "detail_key", "expired_history",
           "finish", "last_whole_gc", "read_runs", "record_key", "with_details"]
