"""The fleet's view: a plan's report (:mod:`memwal.fleet.report`) as a document and as text,
and the metrics a plan publishes.

``memwal fleet status SOURCE...`` plans and shows the report; with ``--state URI`` and no
source it shows the last plan some machine made, and never plans (as the page does).
Statuses: ``idle``, ``behind`` (jobs to run), ``waiting`` (only time frees the owed jobs: a
GC's grace period, quiet hours), ``held`` (a job's lease has a live holder), ``paused`` (an
operator paused it), ``problem`` (the table could not be read).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memwal.core.document import Document
from memwal.core.json_doc import finite
from memwal.core.json_doc import list_of as _list
from memwal.core.json_doc import mapping_of as _map
from memwal.core.text import clip
from memwal.fleet.plan import STATUSES, FleetPlan

ORDER = (*STATUSES, "problem")


def _num(value: Any) -> float:
    """A figure from a stored report (storage is untrusted: anything but a bounded finite number is 0)."""
    return finite(value) or 0.0


@dataclass(frozen=True)
class FleetStatus(Document):
    """A report and the history of plans before it (both plain documents)."""

    report: Mapping[str, Any]
    history: tuple[Mapping[str, Any], ...] = ()

    @property
    def rows(self) -> list[Mapping[str, Any]]:
        return [r for r in _list(self.report.get("top")) if isinstance(r, Mapping)]

    def to_dict(self) -> dict[str, Any]:
        r = self.report
        tables = []
        for row in self.rows:
            holds = _map(row.get("holds"))
            last = (_list(row.get("last")) or [None])[0]
            tables.append({
                "table": row.get("table"), "state": row.get("status"), "debt": row.get("debt"),
                "jobs": row.get("jobs"), "reasons": row.get("reasons"),
                "lag_generations": holds.get("unmerged_generations"),
                "lag_seconds": holds.get("oldest_unmerged_age_seconds"), "holds": holds,
                "waiting": row.get("waiting"), "paused": row.get("paused"), "breaches": row.get("breaches"),
                "error": _map(row.get("last_failure")).get("error"),
                "last_run": None if not isinstance(last, Mapping) else {
                    "job": last.get("job"), "outcome": last.get("status"), "started_at": last.get("at"),
                    "error": last.get("error")}})
        return {"at": r.get("at"), "discovered": r.get("discovered"), "by_state": dict(_map(r.get("by_status"))),
                "debt": r.get("debt"), "skipped": r.get("skipped"), "tables": tables,
                "problems": [{"table": clip(p["table"], 1000), "error": clip(p["error"], 1000)}
                             for p in _list(r.get("problems")) if isinstance(p, Mapping)
                             and isinstance(p.get("table"), str) and isinstance(p.get("error"), str)],
                "sources": list(_list(r.get("sources"))),
                "breaches": r.get("breaches"), "histogram": r.get("histogram"), "history": len(self.history)}

    def render(self) -> str:
        r = self.report
        by = _map(r.get("by_status"))
        try:
            at = datetime.fromtimestamp(_num(r.get("at")), UTC).strftime("%Y-%m-%d %H:%M:%S")
        except (OverflowError, OSError, ValueError):
            at = "-"
        counts = ", ".join(f"{int(_num(by.get(s)))} {s}" for s in ORDER)
        breaches = _map(r.get("breaches"))
        lines = [f"{int(_num(r.get('discovered')))} tables ({counts}), total debt {_num(r.get('debt')):g}; "
                 f"{int(_num(r.get('skipped')))} skipped; {int(_num(breaches.get('tables')))} past a service level; "
                 f"planned {at} UTC"]
        for row in self.rows:
            holds = _map(row.get("holds"))
            age = finite(holds.get("oldest_unmerged_age_seconds"))
            last = (_list(row.get("last")) or [None])[0]
            last_text = "-" if not isinstance(last, Mapping) else f"{last.get('job')} {last.get('status')}"
            lines.append(f"  {_num(row.get('debt')):>8g}  {clip(str(row.get('status')), 8):<8} lag "
                         f"{int(_num(holds.get('unmerged_generations'))):>4} gens "
                         f"{('-' if age is None else f'{_num(age):.0f}s'):>6}  last {clip(last_text, 20):<20} "
                         f"{clip(str(row.get('table')), 300)}")
            for why in _list(row.get("reasons"))[:4]:
                lines.append(f"            {clip(str(why), 300)}")
        if len(self.rows) < _num(r.get("discovered")):
            lines.append(f"  ({int(_num(r.get('discovered'))) - len(self.rows)} more not listed: --top N)")
        return "\n".join(lines)


def publish(plan: FleetPlan, report: Mapping[str, Any]) -> None:
    """The plan's OpenTelemetry metrics: the fleet's counts, each listed table's gauges (the
    top rows and the breaching tables only: bounded), breaches by target, and the histogram
    of pending generations per shard."""
    from memwal.observe.metrics import record_fleet, record_pending, record_slo, record_table

    listed = {str(r.get("table")) for r in report.get("top") or []}
    for t in plan.tables:
        if t.table in listed or t.breaches:
            record_table(t.table, generations=t.state.unmerged_generations,
                         oldest_seconds=t.state.oldest_unmerged_age_seconds or 0.0, debt=t.debt)
    record_fleet(report["by_status"], report["debt"])  # the whole fleet's, after a partial plan too
    record_slo(report["breaches"]["count"], [(b.table, b.slo) for t in plan.tables for b in t.breaches])
    record_pending(len(s.unmerged) for t in plan.tables for s in t.facts.shards)


def history_points(history: Sequence[Mapping[str, Any]], limit: int = 240) -> list[Mapping[str, Any]]:
    """At most ``limit`` points of the history, evenly spread, the newest always kept."""
    points = [p for p in history if isinstance(p, Mapping) and finite(p.get("at")) is not None]
    if len(points) <= limit:
        return points
    step = len(points) / limit
    picked = [points[int(i * step)] for i in range(limit - 1)]
    return [*picked, points[-1]]


__all__ = ["ORDER", "FleetStatus", "history_points", "publish"]
