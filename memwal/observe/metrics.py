"""The suite's OpenTelemetry instruments, recorded through the API only.

The core records with the OpenTelemetry *API*: without an SDK configured every call is a
no-op, so a library user pays nothing; the CLI and the Spark jobs configure the SDK from the
standard ``OTEL_*`` variables (:mod:`memwal.observe.otel`). Names follow OpenTelemetry's
conventions: dotted lower case under ``memwal.``, units on the instrument, low-cardinality
attributes (``job``, ``outcome``, ``engine``, ``shard``, ``index``, ``reason``), except
``table``: the table's full URI on every per-table gauge, so that two tables (``s3://a/events``
and ``s3://b/events``) never share a series. A fleet plan records per-table gauges only for
the tables its report lists and those in breach, so the series stay bounded at any fleet size;
the whole fleet's spread is the pending-generations histogram.

| instrument | kind | attributes |
|---|---|---|
| ``memwal.job.duration`` (s) | histogram | job, outcome, engine |
| ``memwal.merge.rows`` ({row}) | counter | shard, op (upsert, delete) |
| ``memwal.merge.generations`` | counter | shard |
| ``memwal.shard.lag_generations`` / ``lag_rows`` / ``lag_seconds`` | gauges | table, shard |
| ``memwal.shard.listed_generations`` | gauge | table, shard, reader (``list`` or ``mark``: status.py) |
| ``memwal.catchup.behind_generations`` | gauge | table, index |
| ``memwal.table.debt`` / ``memwal.table.lag_generations`` / ``memwal.table.lag_seconds`` | gauges | table |
| ``memwal.fleet.tables`` | gauge | state (idle, behind, waiting, held, paused, problem) |
| ``memwal.fleet.debt`` | gauge | |
| ``memwal.fleet.slo.breaches`` ({table}) | gauge | slo (oldest_unmerged_age, generations_per_shard) |
| ``memwal.table.slo.breach`` | gauge (1 while it breaches) | table, slo: the breaching tables only |
| ``memwal.fleet.shard.pending_generations`` | histogram (one value per shard per plan) | |
| ``memwal.gc.bytes_deleted`` (By) | counter | |
| ``memwal.gc.blocked`` | counter | reason (the gate, without ids) |
| ``memwal.lease.renewals`` / ``memwal.lease.lost`` | counters | job |
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from opentelemetry import metrics

from memwal.core.kept import blocked_by_reason
from memwal.core.version import __version__


@dataclass(frozen=True)
class _Instruments:
    """The instruments, made once (``metrics._Gauge`` is what the API exports for ``create_gauge``)."""

    duration: metrics.Histogram
    merge_rows: metrics.Counter
    merge_generations: metrics.Counter
    lag_generations: metrics._Gauge
    lag_rows: metrics._Gauge
    lag_seconds: metrics._Gauge
    listed: metrics._Gauge
    catchup_behind: metrics._Gauge
    table_debt: metrics._Gauge
    table_lag_generations: metrics._Gauge
    table_lag_seconds: metrics._Gauge
    fleet_tables: metrics._Gauge
    fleet_debt: metrics._Gauge
    gc_bytes: metrics.Counter
    gc_blocked: metrics.Counter
    slo_breaches: metrics._Gauge
    table_breach: metrics._Gauge
    pending: metrics.Histogram
    renewals: metrics.Counter
    lost: metrics.Counter


@cache
def _instruments() -> _Instruments:
    meter = metrics.get_meter("memwal", __version__)
    return _Instruments(
        duration=meter.create_histogram("memwal.job.duration", unit="s", description="wall time of a job run"),
        merge_rows=meter.create_counter("memwal.merge.rows", unit="{row}", description="rows merged"),
        merge_generations=meter.create_counter("memwal.merge.generations", unit="{generation}",
                                               description="generations merged"),
        lag_generations=meter.create_gauge("memwal.shard.lag_generations", unit="{generation}",
                                           description="flushed generations not merged yet"),
        lag_rows=meter.create_gauge("memwal.shard.lag_rows", unit="{row}", description="rows not merged yet"),
        lag_seconds=meter.create_gauge("memwal.shard.lag_seconds", unit="s",
                                       description="age of the oldest unmerged generation"),
        listed=meter.create_gauge("memwal.shard.listed_generations", unit="{generation}",
                                  description="generations a reader of the shard opens, by kind of reader"),
        catchup_behind=meter.create_gauge("memwal.catchup.behind_generations", unit="{generation}",
                                          description="merged generations an index has not caught up with"),
        table_debt=meter.create_gauge("memwal.table.debt", unit="1", description="a table's debt (memwal fleet)"),
        table_lag_generations=meter.create_gauge("memwal.table.lag_generations", unit="{generation}",
                                                 description="a table's unmerged generations, all shards"),
        table_lag_seconds=meter.create_gauge("memwal.table.lag_seconds", unit="s",
                                             description="age of a table's oldest unmerged generation"),
        fleet_tables=meter.create_gauge("memwal.fleet.tables", unit="{table}",
                                        description="the fleet's tables by state"),
        fleet_debt=meter.create_gauge("memwal.fleet.debt", unit="1", description="the fleet's total debt"),
        gc_bytes=meter.create_counter("memwal.gc.bytes_deleted", unit="By", description="bytes GC deleted"),
        gc_blocked=meter.create_counter("memwal.gc.blocked", unit="{generation}",
                                        description="generations GC kept, by the gate that kept them"),
        renewals=meter.create_counter("memwal.lease.renewals", unit="{renewal}",
                                      description="lease renewals by heartbeats"),
        lost=meter.create_counter("memwal.lease.lost", unit="{lease}", description="leases found lost"),
        slo_breaches=meter.create_gauge("memwal.fleet.slo.breaches", unit="{table}",
                                        description="tables past a service-level target, by target"),
        table_breach=meter.create_gauge("memwal.table.slo.breach", unit="1",
                                        description="1 while the table is past the target"),
        pending=meter.create_histogram("memwal.fleet.shard.pending_generations", unit="{generation}",
                                       description="unmerged generations of each shard at a fleet plan",
                                       explicit_bucket_boundaries_advisory=[0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512,
                                                                            1024]),
    )


def record_run(job: str, outcome: str, engine: str, seconds: float, doc: Mapping[str, Any]) -> None:
    """The metrics of one finished run (its outcome, wall time and result document)."""
    m = _instruments()
    m.duration.record(max(0.0, seconds), {"job": job, "outcome": outcome, "engine": engine})
    if job == "merge":
        for s in doc.get("shards", []):
            shard = {"shard": s["shard_id"]}
            m.merge_rows.add(s["rows_upserted"], {**shard, "op": "upsert"})
            m.merge_rows.add(s["rows_deleted"], {**shard, "op": "delete"})
            m.merge_generations.add(s["to_generation"] - s["from_generation"] + 1, shard)
    elif job == "gc":
        m.gc_bytes.add(doc.get("bytes_freed", 0))
        for reason, n in blocked_by_reason(doc).items():
            m.gc_blocked.add(n, {"reason": reason})


def record_lag(table: str, lag: Mapping[str, tuple[int, int | None, float | None]],
               behind: Mapping[str, int], listed: Mapping[str, Mapping[str, int]] | None = None) -> None:
    """Per shard lag gauges (unmerged generations, rows, oldest age), per index catch-up gauges
    (merged generations not caught up) of ``table`` and, per shard and kind of reader, the
    generations it opens (``listed``), at every job's end and on ``status`` (rows only where
    known: a manifest may lack them, and unknown is not 0)."""
    m = _instruments()
    for shard_id, by_reader in (listed or {}).items():
        for reader, n in by_reader.items():
            m.listed.set(n, {"table": table, "shard": shard_id, "reader": reader})
    for shard_id, (generations, rows, age) in lag.items():
        shard = {"table": table, "shard": shard_id}
        m.lag_generations.set(generations, shard)
        if rows is not None:
            m.lag_rows.set(rows, shard)
        m.lag_seconds.set(age or 0.0, shard)
    for name, n in behind.items():
        m.catchup_behind.set(n, {"table": table, "index": name})
    record_table(table, generations=sum(g for g, _, _ in lag.values()),
                 oldest_seconds=max((a or 0.0 for _, _, a in lag.values()), default=0.0))


def record_table(table: str, *, generations: int, oldest_seconds: float, debt: float | None = None) -> None:
    """One table's gauges, by its full URI."""
    m = _instruments()
    attrs = {"table": table}
    m.table_lag_generations.set(generations, attrs)
    m.table_lag_seconds.set(oldest_seconds, attrs)
    if debt is not None:
        m.table_debt.set(debt, attrs)


def record_fleet(by_state: Mapping[str, int], debt: float) -> None:
    """The fleet's gauges: tables by state, total debt."""
    m = _instruments()
    for state, n in by_state.items():
        m.fleet_tables.set(n, {"state": state})
    m.fleet_debt.set(debt)


def record_slo(counts: Mapping[str, int], breaching: Iterable[tuple[str, str]]) -> None:
    """The fleet's breaches by target, and a gauge per breaching (table, target)."""
    m = _instruments()
    for slo, n in counts.items():
        m.slo_breaches.set(n, {"slo": slo})
    for table, slo in breaching:
        m.table_breach.set(1, {"table": table, "slo": slo})


def record_pending(pending: Iterable[int]) -> None:
    """Each shard's unmerged generations, into the fleet's histogram."""
    m = _instruments()
    for n in pending:
        m.pending.record(n)


def lease_renewed(kind: str) -> None:
    _instruments().renewals.add(1, {"job": kind})


def lease_lost(kind: str) -> None:
    _instruments().lost.add(1, {"job": kind})
