"""The fleet's view: a plan's report (:mod:`memwal.fleet.report`) as a document and as text,
and the metrics a plan publishes.

``memwal fleet status SOURCE...`` plans and shows the report; with ``--state URI`` and no
source it shows the last plan some machine made, and never plans (as the page does).
Statuses: ``idle``, ``behind`` (jobs to run), ``waiting`` (only time frees the owed jobs: a
GC's grace period, quiet hours), ``held`` (a job's lease has a live holder), ``paused`` (an
operator paused it), ``problem`` (the table could not be read).

What changed since that plan is read live (:func:`live`): each listed table's last run (what
ran, the result, when, from the run log) and the pauses an operator made or lifted since
(``controls.json``), so a run, or a pause made through the control DAG, shows at once.
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
from memwal.core.text import clip, one_line
from memwal.fleet.plan import STATUSES, FleetPlan
from memwal.fleet.totals import OWES, POLICY_PAUSED, PROBLEM, SOURCE, STATUS, briefs

ORDER = (*STATUSES, "problem")
#: What status and the page say when this process has no fleet key.
UNAUTHENTICATED = ("pauses are unauthenticated: no MEMWAL_FLEET_KEY here, so whoever can write the fleet's state can "
                   "pause its tables (docs/operations/fleet.md, 'Who may pause')")


def _num(value: Any) -> float:
    """A figure from a stored report (storage is untrusted: anything but a bounded finite number is 0)."""
    return finite(value) or 0.0


def live(report: Mapping[str, Any], runs: Mapping[str, Any] | None,
         controls: Mapping[str, Any] | None, location: str = "") -> dict[str, Any]:
    """``report`` with what changed since its plan (``runs``: the state's run log; ``controls``:
    the controls document of the state at ``location``; None: not read): each listed table's
    last run and GC wait, and the pauses in force now (the policy's, as planned, and the
    state's, live), each table's status moved to match and every figure summed again over the
    moved briefs (:func:`memwal.fleet.report.with_totals`). The plan's own figures (debt,
    reasons) stay the plan's. A pause in the state that memwal did not write is shown as such
    and holds nothing (:func:`memwal.fleet.control_log.stored_pauses`); ``pauses_authenticated``
    says whether this process holds the fleet's key (without it, whoever writes the state can
    pause tables)."""
    from memwal.fleet.control_log import authenticated, stored_pauses
    from memwal.fleet.controls import Controls
    from memwal.fleet.report import with_totals
    from memwal.fleet.runs import entry_of

    stored = None if controls is None else stored_pauses(controls, location)
    state = None if stored is None else Controls().with_state(stored)  # read once: its warnings once
    index = briefs(report.get("index"))
    if state is not None:
        for uri, b in index.items():
            index[uri] = moved(b, b[POLICY_PAUSED] or state.paused(uri, b[SOURCE]) is not None)
    rows = []
    for row in _list(report.get("top")):
        if not isinstance(row, Mapping):
            continue
        r = dict(row)
        table, status = str(r.get("table")), str(r.get("status"))
        entry = entry_of(runs or {}, table)
        if entry["at"] is not None or entry["last"]:  # the run log has the table
            r.update(last=entry["last"][:5], last_at=entry["at"], gc=entry["gc"])
        if state is not None and table in index:
            planned = r.get("paused") if isinstance(r.get("paused"), Mapping) else None
            now = planned if index[table][POLICY_PAUSED] else state.paused(table, index[table][SOURCE])
            r["reasons"] = [x for x in _list(r.get("reasons")) if not str(x).startswith("paused by ")]
            r["paused"] = None if now is None else dict(now) if isinstance(now, Mapping) else now.to_dict()
            r["status"] = index[table][STATUS]
            if status == "paused" and r["status"] != "paused":
                r["reasons"].insert(0, "resumed since the last plan: its jobs run in the next round")
        rows.append(r)
    out = with_totals({**report, "top": rows, "index": index})
    if stored is not None:
        out["pauses"] = [p.to_dict() for p in stored]
    out["pauses_authenticated"] = authenticated()
    return out


def moved(brief: list[Any], paused: bool) -> list[Any]:
    """A table's brief with its status as a pause now makes it: ``paused``, or, resumed since
    the plan, ``behind`` when it owes jobs (``idle`` when not)."""
    status = brief[STATUS]
    now = "paused" if paused else ("behind" if brief[OWES] else "idle") if status == "paused" else status
    if now == status or status == PROBLEM:
        return brief
    out = list(brief)
    out[STATUS] = now
    return out


@dataclass(frozen=True)
class FleetStatus(Document):
    """A report and the history of plans before it (both plain documents); build it with
    :func:`live` applied to show what changed since the plan."""

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
            tables.append({
                "table": row.get("table"), "state": row.get("status"), "debt": row.get("debt"),
                "jobs": row.get("jobs"), "reasons": row.get("reasons"),
                "lag_generations": holds.get("unmerged_generations"),
                "lag_seconds": holds.get("oldest_unmerged_age_seconds"), "holds": holds,
                "waiting": row.get("waiting"), "paused": row.get("paused"), "breaches": row.get("breaches"),
                "error": _map(row.get("last_failure")).get("error"), "gc": row.get("gc"),
                "last_run": last_run(row)})
        return {"at": r.get("at"), "discovered": r.get("discovered"), "by_state": dict(_map(r.get("by_status"))),
                "debt": r.get("debt"), "skipped": r.get("skipped"), "tables": tables,
                "problems": [{"table": clip(p["table"], 1000), "error": clip(p["error"], 1000)}
                             for p in _list(r.get("problems")) if isinstance(p, Mapping)
                             and isinstance(p.get("table"), str) and isinstance(p.get("error"), str)],
                "sources": list(_list(r.get("sources"))), "groups": list(_list(r.get("groups"))),
                "breaches": r.get("breaches"), "histogram": r.get("histogram"), "history": len(self.history),
                "pauses": [p for p in _list(r.get("pauses")) if isinstance(p, Mapping)],
                "pauses_authenticated": r.get("pauses_authenticated") is True,
                "unmatched": [clip(u, 1000) for u in _list(r.get("unmatched")) if isinstance(u, str)]}

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
            lines.append(f"  {_num(row.get('debt')):>8g}  {clip(str(row.get('status')), 8):<8} lag "
                         f"{int(_num(holds.get('unmerged_generations'))):>4} gens "
                         f"{('-' if age is None else f'{_num(age):.0f}s'):>6}  {clip(str(row.get('table')), 300)}")
            lines += [f"            {clip(one_line(why), 400)}" for why in row_lines(row)]  # one line each
        if len(self.rows) < _num(r.get("discovered")):
            lines.append(f"  ({int(_num(r.get('discovered'))) - len(self.rows)} more not listed: --top N)")
        if r.get("pauses_authenticated") is False:
            lines.append(UNAUTHENTICATED)
        return "\n".join(lines)


def _when(at: Any) -> str:
    try:
        return datetime.fromtimestamp(_num(at), UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):
        return "?"


def last_run(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """A row's last cycle: when it ran, each job with its result, and the cycle's outcome (the
    worst of its jobs'): ``failed``, ``cancelled``, ``held``, ``waiting`` or ``done``."""
    jobs = [j for j in _list(row.get("last")) if isinstance(j, Mapping)]
    if not jobs:
        return None
    statuses = [str(j.get("status")) for j in jobs]
    outcome = next((s for s in ("failed", "cancelled", "held", "waiting") if s in statuses), "done")
    return {"at": row.get("last_at") if row.get("last_at") is not None else jobs[0].get("at"), "outcome": outcome,
            "jobs": [{"job": j.get("job"), "status": j.get("status"), "summary": j.get("summary"),
                      "error": j.get("error")} for j in jobs]}


def reasons_of(row: Mapping[str, Any]) -> list[str]:
    """A row's reasons as planned (its pause aside: said apart), and what kept its last GC's
    generations when no reason says it already (GC's own ``wait``: :mod:`memwal.core.waits`)."""
    from memwal.core.waits import describe

    out = [str(x) for x in _list(row.get("reasons")) if not str(x).startswith("paused by ")]
    gc = describe(row.get("gc") if isinstance(row.get("gc"), Mapping) else None)
    if gc and not any("the last GC" in x for x in out):
        out.append(f"gc: {gc}")
    return out


def row_lines(row: Mapping[str, Any]) -> list[str]:
    """A row's lines under it: its pause, its reasons (:func:`reasons_of`), and its last run:
    what ran, the result, when."""
    out = []
    paused = row.get("paused")
    if isinstance(paused, Mapping):
        since = f" since {_when(paused.get('at'))}" if paused.get("at") is not None else ""
        out.append(f"paused by {paused.get('by')}{since}: {paused.get('reason')}"
                   + (f" ({len(_list(row.get('withheld')))} jobs withheld)" if _list(row.get("withheld")) else ""))
    out += reasons_of(row)
    last = last_run(row)
    if last is not None:
        ran = ", ".join(f"{j['job']} {j['status']}" + (f" ({j['error'] or j['summary']})" if j["status"] not in
                                                       ("done", "not-run") and (j["error"] or j["summary"]) else "")
                        for j in last["jobs"])
        out.append(f"last run {_when(last['at'])}: {last['outcome']}: {ran}")
    return out


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


__all__ = ["ORDER", "UNAUTHENTICATED", "FleetStatus", "history_points", "last_run", "live", "publish", "reasons_of",
           "row_lines"]
