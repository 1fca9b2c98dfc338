"""The last plan, as every reader of the fleet sees it: one bounded report, and the trend.

A plan of 10,000 tables is too big to hand around and too slow to redo for a page view, so
each plan leaves a report in the state's ``plan.json`` (:mod:`memwal.fleet.state`): the
fleet's counts by status, a breakdown per source and per quota group, the ``top`` tables
(ranked by debt, ties by the oldest unmerged generation and the most unmerged bytes, each
with what it holds, why it is where it is, and its last run), the service-level breaches, the
histogram of pending generations per shard, the problems; and beside it the history of every
earlier plan's totals, for the trends. The page and ``memwal fleet status --state`` read it
and never plan. Its size does not grow with the fleet (past ``top`` and the caps below).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memwal.core.json_doc import finite, list_of, mapping_of
from memwal.fleet.control_log import stored_pauses
from memwal.fleet.plan import STATUSES, FleetPlan, TablePlan
from memwal.fleet.runs import entry_of, failures_of
from memwal.fleet.totals import brief_of, briefs, problem_brief, totals

if TYPE_CHECKING:
    from memwal.fleet.state import FleetState

#: Plans kept in the history (two weeks of plans every 10 minutes).
MAX_HISTORY = 2016
#: Most breaches, problems and failures a report names (all are counted).
MAX_NAMED = 200
#: 2: every table has a brief in ``index`` (:mod:`memwal.fleet.totals`), and the figures are its sums.
REPORT_FORMAT = 2


def _row(t: TablePlan, runs: Mapping[str, Any]) -> dict[str, Any]:
    st = t.state
    entry = entry_of(runs, t.table)
    failures = [f for f in entry.get("failures") or [] if isinstance(f, Mapping)]
    return {
        "table": t.table, "source": t.source, "group": t.group, "status": t.status, "debt": t.debt,
        "jobs": list(t.jobs), "reasons": list(t.reasons),
        "waiting": {j: {"until": u, "why": w} for j, (u, w) in t.waiting.items()},
        "paused": None if t.paused is None else t.paused.to_dict(), "withheld": list(t.withheld),
        "breaches": [b.slo for b in t.breaches],
        "holds": {"shards": st.shards, "unmerged_generations": st.unmerged_generations,
                  "max_shard_generations": st.max_shard_generations, "max_shard_listed": st.max_shard_listed,
                  "unmerged_rows": st.unmerged_rows,
                  "unmerged_bytes": st.unmerged_bytes, "oldest_unmerged_age_seconds": st.oldest_unmerged_age_seconds,
                  "fragments": st.fragments, "collectable_generations": st.collectable_generations,
                  "writer_idle_seconds": st.writer_idle_seconds, "orphaned_shards": st.orphaned_shards,
                  "index_behind": dict(st.index_behind), "leases_held": list(st.leases_held)},
        "last": list(entry.get("last") or [])[:5], "last_at": entry.get("at"),
        "failures": len(failures), "last_failure": failures[-1] if failures else None,
        "gc": entry.get("gc"),
    }


def report_of(plan: FleetPlan, *, top: int, runs: Mapping[str, Any] | None = None,
              controls: Mapping[str, Any] | None = None, location: str = "",
              unmatched: list[str] | None = None) -> dict[str, Any]:
    """The report of ``plan`` (see the module docstring); ``runs``: the state's run log, for
    each listed table's last run and failures; ``controls``: the controls document of the state
    at ``location``; ``unmatched``: the policy's keys and pauses that match no table (warnings).
    Every figure is a sum over the tables' briefs (:mod:`memwal.fleet.totals`)."""
    runs = runs or {}
    index = {t.table: brief_of(t) for t in plan.tables}
    index.update({p.table: problem_brief(p) for p in plan.problems})
    breached = sorted((b for t in plan.tables for b in t.breaches), key=lambda b: -b.value / max(b.target, 1e-9))
    report = {
        "format": REPORT_FORMAT, "at": plan.at, "skipped": len(plan.skipped), "requests": plan.requests,
        "seconds": round(plan.seconds, 3), "shares": dict(plan.shares),
        "top": [_row(t, runs) for t in plan.tables[:top]],
        "named_breaches": [b.to_dict() for b in breached[:MAX_NAMED]],
        "problems": [{"table": p.table, "error": p.error} for p in plan.problems[:MAX_NAMED]],
        "failures": failures_of(runs)[:MAX_NAMED // 4],
        "pauses": [p.to_dict() for p in stored_pauses(controls or {}, location)[:MAX_NAMED]],
        "unmatched": list(unmatched or [])[:MAX_NAMED],
        "index": index,  # every table's brief: what the figures sum, and what a partial plan replaces
    }
    return with_totals(report)


def with_totals(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with every figure summed again over its ``index`` (see
    :mod:`memwal.fleet.totals`): the counts, per source and group, breaches and histogram."""
    t = totals(report["index"], {str(k): finite(v) or 0.0 for k, v in mapping_of(report.get("shares")).items()})
    named = report.pop("named_breaches", None)
    if named is None:
        named = mapping_of(report.get("breaches")).get("named") or []
    return {**report, **{k: v for k, v in t.items() if k not in ("breach_counts", "breached_tables")},
            "breaches": {"count": t["breach_counts"], "tables": t["breached_tables"], "named": named}}


def patch_report(old: Mapping[str, Any] | None, new: dict[str, Any], *, top: int) -> dict[str, Any]:
    """The last full report updated for the tables a partial plan (``new``: the tables an event
    named, or those a run ran) planned again: their briefs, rows, named breaches and problems
    replaced, and every figure summed again over the briefs (:func:`with_totals`)."""
    if old is None or old.get("format") != REPORT_FORMAT or not isinstance(old.get("index"), Mapping) \
            or not isinstance(old.get("top"), list):
        return new
    planned = set(new["index"])
    index = {k: v for k, v in briefs(old["index"]).items() if k not in planned}
    index.update(new["index"])
    rows = [r for r in old["top"] if isinstance(r, Mapping) and isinstance(r.get("table"), str)
            and r["table"] not in planned] + list(new["top"])
    rows.sort(key=lambda r: (-(finite(r.get("debt")) or 0.0), -(finite(mapping_of(r.get("holds")).get(
        "oldest_unmerged_age_seconds")) or 0.0), str(r.get("table"))))
    named = [b for b in list_of(mapping_of(old.get("breaches")).get("named")) if isinstance(b, Mapping)
             and isinstance(b.get("table"), str) and b["table"] not in planned] + new["breaches"]["named"]
    problems = [p for p in list_of(old.get("problems")) if isinstance(p, Mapping) and isinstance(p.get("table"), str)
                and p["table"] not in planned] + new["problems"]
    shares = {**mapping_of(old.get("shares")), **new["shares"]}
    out = {**old, "at": new["at"], "requests": new["requests"], "seconds": new["seconds"], "partial": True,
           "index": index, "top": rows[:top], "named_breaches": named[:MAX_NAMED], "problems": problems[:MAX_NAMED],
           "shares": shares}
    return with_totals(out)


#: The figures of a history point (:func:`point_of`); a stored point keeps these alone.
POINT_KEYS = ("at", "discovered", "debt", *STATUSES, "breaches", "oldest_unmerged_age_seconds",
              "unmerged_generations", "requests")


def _stored_point(p: Any) -> dict[str, Any] | None:
    """A stored history point rebuilt from its figures, each a bounded finite number or None
    (None: not a point; a forged ``Infinity`` must not outlive 2,016 later plans)."""
    if not isinstance(p, Mapping) or finite(p.get("at")) is None:
        return None
    return {k: finite(p.get(k)) for k in POINT_KEYS}


def point_of(report: Mapping[str, Any]) -> dict[str, Any]:
    """One plan's totals, for the trends."""
    return {"at": report["at"], "discovered": report["discovered"], "debt": report["debt"],
            **{k: v for k, v in report["by_status"].items()}, "breaches": report["breaches"]["tables"],
            "oldest_unmerged_age_seconds": report["oldest_unmerged_age_seconds"],
            "unmerged_generations": report["unmerged_generations"], "requests": report["requests"]}


def save_report(state: FleetState, report: dict[str, Any],
                read: tuple[dict[str, Any], str | None] | None = None) -> dict[str, Any]:
    """The report as the last plan's, its totals added to the history (compare-and-swap).
    ``read``: ``plan.json`` as the plan read it (document, ETag), so that it is not read again."""
    def change(doc: dict[str, Any]) -> dict[str, Any]:
        history = [q for p in doc.get("history") or [] if (q := _stored_point(p)) is not None]
        return {"report": report, "history": [*history, point_of(report)][-MAX_HISTORY:]}

    return state.update("plan.json", change, read=read)


def last_report(state: FleetState) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The last plan's report (None: no plan yet, or an unreadable one) and the history."""
    return report_in(state.read("plan.json")[0])


def report_in(doc: dict[str, Any]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The report and history of a ``plan.json`` document (see :func:`last_report`)."""
    report = doc.get("report")
    history = [q for p in doc.get("history") or [] if (q := _stored_point(p)) is not None]
    if not isinstance(report, dict) or report.get("format") != REPORT_FORMAT:
        return None, history
    return report, history


__all__ = ["MAX_HISTORY", "REPORT_FORMAT", "last_report", "patch_report", "point_of", "report_in", "report_of",
           "save_report", "with_totals"]
