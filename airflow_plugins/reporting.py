"""What a MemWAL task tells Airflow besides its XCom: Airflow's own metrics, and the facts lineage needs.

Every operator's ``execute`` runs through :func:`observed`, which times the job, keeps a
:class:`RunReport` on the operator (the table, the result documents and the runs' history
records, for :mod:`memwal.airflow.lineage`), and reports through Airflow's ``Stats``, which
goes where Airflow's ``[metrics]`` configuration says (StatsD, Datadog, OpenTelemetry, or nowhere):

| metric | kind | tags |
|---|---|---|
| ``memwal.<job>.duration`` (ms) | timing | table, engine, outcome, dag_id, task_id |
| ``memwal.<job>.<outcome>`` (``ok``, ``nothing_to_do``, ``failed``) | counter | as above |
| ``memwal.merge.generations``, ``memwal.merge.rows_upserted``, ``memwal.merge.rows_deleted`` | counters | |
| ``memwal.gc.bytes_deleted``, ``memwal.gc.generations_deleted`` | counters | |
| ``memwal.table.lag_generations``, ``lag_rows``, ``lag_seconds``, ``debt`` | gauges | table |
| ``memwal.fleet.tables``, ``memwal.fleet.debt``, ``memwal.fleet.discovered`` | gauges | state |
| ``memwal.fleet.slo.breaches`` | gauge | slo |
| ``memwal.fleet.shards.pending`` (shards by pending generations, a histogram's buckets) | gauge | le |
| ``memwal.fleet.jobs``, ``memwal.fleet.tables_failed`` | gauges | dag_id, status |

The table is a tag (its full URI), never part of a metric's name: a name per table would make
a series per table and per metric whatever the backend (40,000 at 10,000 tables). Give Airflow
a metrics backend that keeps tags (StatsD with Datadog or InfluxDB tags, or OpenTelemetry):
plain StatsD drops them, and the per-table gauges then read as one series. A fleet plan sends
per-table gauges only for the tables its report lists and those past a service level, so the
series stay bounded at any fleet size; the spread of the whole fleet is the pending-generations
histogram. A job's lag is what its run's history record says it left; the fleet's, its
planning pass's (:mod:`memwal.airflow.fleet_operators`). Reporting never fails a task.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from airflow.sdk import Context

T = TypeVar("T")


@dataclass
class RunReport:
    """One task's MemWAL runs, as lineage and metrics see them."""

    action: str  # merge, ..., maintenance, checkpoint-create, checkpoint-delete
    uri: str | None = None
    account: str | None = None  # an Azure storage account (the OpenLineage namespace needs it); never a secret
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)  # job -> its result document
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # job -> its history record
    seconds: float = 0.0
    error: str | None = None

    @property
    def outcome(self) -> str:
        if self.error is not None:
            return "failed"
        outcomes = [r.get("outcome") for r in self.records.values()]
        if "failed" in outcomes:
            return "failed"
        if outcomes and all(o == "nothing-to-do" for o in outcomes):
            return "nothing-to-do"
        if not outcomes and all(d.get("version") is None for d in self.docs.values()):
            return "nothing-to-do"
        return "ok"


def report_of(op: Any, action: str | None = None) -> RunReport:
    """The report kept on the operator for this try (created on first use)."""
    report: RunReport | None = op.__dict__.get("_memwal_report")
    if report is None:
        report = RunReport(action or str(getattr(op, "action", "")))
        op.__dict__["_memwal_report"] = report
    return report


_ACCOUNT_KEYS = ("azure_storage_account_name", "account_name", "azure_storage_account")


def note_table(op: Any, uri: str, storage_options: dict[str, str]) -> None:
    """Remember the table (and, for Azure, its account name: not a credential) for lineage."""
    report = report_of(op)
    report.uri = uri
    report.account = next((storage_options[k] for k in _ACCOUNT_KEYS if storage_options.get(k)), None)


def observed(op: Any, context: Context, body: Callable[[Context], T], *, action: str | None = None,
             storage_options: Callable[[], tuple[str, dict[str, str]]] | None = None) -> T:
    """Run ``body(context)`` (the operator's work), then report it, whether it worked or not.

    ``storage_options`` resolves the table again after the run to read its history records (the
    credentials are never kept on the operator)."""
    op.__dict__["_memwal_report"] = RunReport(action or op.action)
    report = report_of(op)
    started = time.monotonic()
    try:
        result = body(context)
    except BaseException as exc:
        report.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise
    finally:
        report.seconds = time.monotonic() - started
        if storage_options is not None and report.docs:
            _find_records(op, report, storage_options)
        _emit_stats(op, report, context)
    return result


def _find_records(op: Any, report: RunReport, resolve: Callable[[], tuple[str, dict[str, str]]]) -> None:
    """The history record of each job run the task made (by the run id its document names)."""
    try:
        from memwal.history.log import read_runs
        from memwal.table import Table

        uri, options = resolve()
        store = Table(uri, options).store
        for job, doc in report.docs.items():
            run_id = doc.get("run_id") if isinstance(doc, dict) else None
            if not run_id:
                continue
            for record in read_runs(store, job=job, limit=20):
                if record.run_id == run_id:
                    report.records[job] = record.to_dict()
                    break
    except Exception as exc:  # noqa: BLE001 - reporting never fails a task (a missing history, a store error)
        op.log.warning("memwal: the run's history record could not be read for metrics and lineage: %s", exc)


def _tag(value: Any) -> str:
    """A tag value StatsD and InfluxDB accept (Airflow drops a metric with a bad tag)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(value))[:100]


def stats_client() -> Any:
    """Airflow's ``Stats`` (None on an Airflow without it: no metrics rather than a failed task)."""
    try:
        from airflow.sdk.observability import stats
    except ImportError:  # pragma: no cover - older Airflow
        return None
    return stats


def table_gauges(stats: Any, uri: str, *, generations: int, seconds: float, rows: int | None = None,
                 debt: float | None = None) -> None:
    """One table's lag (and debt) gauges, the table a tag (its full URI), never in the name."""
    tags = {"table": uri}
    stats.gauge("memwal.table.lag_generations", generations, tags=tags)
    stats.gauge("memwal.table.lag_seconds", round(seconds, 3), tags=tags)
    if rows is not None:
        stats.gauge("memwal.table.lag_rows", rows, tags=tags)
    if debt is not None:
        stats.gauge("memwal.table.debt", debt, tags=tags)


def fleet_gauges(report: dict[str, Any]) -> None:
    """A fleet plan's report on Airflow's Stats (see the module docstring); never raises."""
    stats = stats_client()
    if stats is None:
        return
    try:
        for state, n in report["by_status"].items():
            stats.gauge("memwal.fleet.tables", n, tags={"state": state})
        stats.gauge("memwal.fleet.debt", report["debt"])
        stats.gauge("memwal.fleet.discovered", report["discovered"])
        for slo, n in report["breaches"]["count"].items():
            stats.gauge("memwal.fleet.slo.breaches", n, tags={"slo": slo})
        hist = report["histogram"]
        for bound, n in zip([*map(str, hist["bounds"]), "inf"], hist["counts"], strict=True):
            stats.gauge("memwal.fleet.shards.pending", n, tags={"le": bound})
        breaching = {b["table"] for b in report["breaches"]["named"]}
        for row in report["top"]:
            if row["status"] != "idle" or row["table"] in breaching:
                holds = row["holds"]
                table_gauges(stats, row["table"], generations=holds["unmerged_generations"],
                             rows=holds["unmerged_rows"], seconds=holds["oldest_unmerged_age_seconds"] or 0.0,
                             debt=row["debt"])
    except Exception as exc:  # noqa: BLE001 - metrics never fail a task
        import logging

        logging.getLogger(__name__).warning("memwal fleet: metrics not reported: %s", exc)


def _emit_stats(op: Any, report: RunReport, context: Context) -> None:
    stats = stats_client()
    if stats is None:
        return
    try:
        ti = context.get("ti") if hasattr(context, "get") else None
        outcome = report.outcome
        tags = {"table": report.uri or "unknown", "outcome": _tag(outcome),
                "dag_id": _tag(getattr(ti, "dag_id", None) or getattr(op, "dag_id", "")),
                "task_id": _tag(getattr(op, "task_id", ""))}
        jobs = list(report.docs) or [report.action]
        for job in jobs:
            doc = report.docs.get(job) or {}
            record = report.records.get(job) or {}
            job_tags = {**tags, "engine": _tag(doc.get("engine") or getattr(op, "engine", "") or "local")}
            if record.get("outcome"):
                job_tags["outcome"] = _tag(record["outcome"])
            seconds = (record["finished_at"] - record["started_at"]) if record.get("finished_at") else (
                report.seconds / len(jobs))
            stats.timing(f"memwal.{_tag(job)}.duration", seconds * 1000.0, tags=job_tags)
            stats.incr(f"memwal.{_tag(job)}.{job_tags['outcome'].replace('-', '_')}", tags=job_tags)
            _job_figures(stats, job, doc, tags)
        lag = next((r["lag"] for r in reversed(list(report.records.values())) if r.get("lag")), None)
        if lag and report.uri:
            table_gauges(stats, report.uri, generations=sum(int(v[0] or 0) for v in lag.values()),
                         rows=sum(int(v[1] or 0) for v in lag.values()),
                         seconds=max((float(v[2] or 0) for v in lag.values()), default=0.0))
    except Exception as exc:  # noqa: BLE001 - metrics never fail a task
        op.log.warning("memwal: metrics not reported: %s", exc)


def _job_figures(stats: Any, job: str, doc: dict[str, Any], tags: dict[str, str]) -> None:
    if job == "merge" and doc.get("shards"):
        shards = doc["shards"]
        stats.incr("memwal.merge.generations", sum(s["to_generation"] - s["from_generation"] + 1 for s in shards),
                   tags=tags)
        stats.incr("memwal.merge.rows_upserted", sum(s["rows_upserted"] for s in shards), tags=tags)
        stats.incr("memwal.merge.rows_deleted", sum(s["rows_deleted"] for s in shards), tags=tags)
    elif job == "gc" and not doc.get("dry_run"):
        stats.incr("memwal.gc.bytes_deleted", int(doc.get("bytes_freed") or 0), tags=tags)
        stats.incr("memwal.gc.generations_deleted", len(doc.get("deleted") or []), tags=tags)
