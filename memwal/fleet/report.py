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

from memwal.core.json_doc import finite, mapping_of
from memwal.fleet.control_log import stored_pauses
from memwal.fleet.plan import STATUSES, FleetPlan, TablePlan
from memwal.fleet.runs import entry_of, failures_of
from memwal.fleet.slo import AGE, GENERATIONS, histogram

if TYPE_CHECKING:
    from memwal.fleet.state import FleetState

#: Plans kept in the history (two weeks of plans every 10 minutes).
MAX_HISTORY = 2016
#: Most breaches, problems and failures a report names (all are counted).
MAX_NAMED = 200
REPORT_FORMAT = 1


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
    at ``location``;
    ``unmatched``: the policy's keys and pauses that match no table (warnings)."""
    runs = runs or {}
    sources: dict[str, dict[str, Any]] = {}
    groups: dict[str, dict[str, Any]] = {}
    breaches = []
    for t in plan.tables:
        s = sources.setdefault(t.source, {"source": t.source, "tables": 0, "by_status": dict.fromkeys(STATUSES, 0),
                                          "debt": 0.0, "unmerged_generations": 0, "oldest_unmerged_age_seconds": None,
                                          "breaches": 0, "problems": 0})
        s["tables"] += 1
        s["by_status"][t.status] += 1
        s["debt"] = round(s["debt"] + t.debt, 2)
        s["unmerged_generations"] += t.state.unmerged_generations
        age = t.state.oldest_unmerged_age_seconds
        if age is not None and (s["oldest_unmerged_age_seconds"] is None or age > s["oldest_unmerged_age_seconds"]):
            s["oldest_unmerged_age_seconds"] = age
        s["breaches"] += bool(t.breaches)
        g = groups.setdefault(t.group, {"group": t.group, "share": plan.shares.get(t.group, 0.0), "tables": 0,
                                        "with_work": 0, "debt": 0.0})
        g["tables"] += 1
        g["with_work"] += bool(t.jobs)
        g["debt"] = round(g["debt"] + t.debt, 2)
        breaches += list(t.breaches)
    for p in plan.problems:
        sources.setdefault(p.source, {"source": p.source, "tables": 0, "by_status": dict.fromkeys(STATUSES, 0),
                                      "debt": 0.0, "unmerged_generations": 0, "oldest_unmerged_age_seconds": None,
                                      "breaches": 0, "problems": 0})["problems"] += 1
    ages = [t.state.oldest_unmerged_age_seconds for t in plan.tables if t.state.oldest_unmerged_age_seconds]
    breached = sorted(breaches, key=lambda b: -b.value / max(b.target, 1e-9))
    return {
        "format": REPORT_FORMAT, "at": plan.at, "discovered": plan.discovered, "debt": plan.debt,
        "by_status": plan.by_status(), "skipped": len(plan.skipped), "requests": plan.requests,
        "seconds": round(plan.seconds, 3),
        "unmerged_generations": sum(t.state.unmerged_generations for t in plan.tables),
        "oldest_unmerged_age_seconds": max(ages, default=None),
        "orphaned_tables": sum(1 for t in plan.tables if t.orphaned),
        "sources": sorted(sources.values(), key=lambda s: (-s["debt"], s["source"])),
        "groups": sorted(groups.values(), key=lambda g: g["group"]),
        "top": [_row(t, runs) for t in plan.tables[:top]],
        "breaches": {"count": {AGE: sum(1 for b in breaches if b.slo == AGE),
                               GENERATIONS: sum(1 for b in breaches if b.slo == GENERATIONS)},
                     "tables": len({b.table for b in breaches}),
                     "named": [b.to_dict() for b in breached[:MAX_NAMED]]},
        "histogram": histogram(len(s.unmerged) for t in plan.tables for s in t.facts.shards),
        "problems": [{"table": p.table, "error": p.error} for p in plan.problems[:MAX_NAMED]],
        "problem_count": len(plan.problems),
        "failures": failures_of(runs)[:MAX_NAMED // 4],
        "pauses": [p.to_dict() for p in stored_pauses(controls or {}, location)[:MAX_NAMED]],
        "unmatched": list(unmatched or [])[:MAX_NAMED],
        # every table that is not idle, in brief: what a plan of a few tables updates (patch_report)
        "index": {t.table: _brief(t) for t in plan.tables if t.status != "idle"},
    }


def _brief(t: TablePlan) -> list[Any]:
    """[status, debt, source, breaches (targets), unmerged generations, oldest unmerged age]."""
    return [t.status, t.debt, t.source, [b.slo for b in t.breaches], t.state.unmerged_generations,
            t.state.oldest_unmerged_age_seconds]


def patch_report(old: Mapping[str, Any] | None, new: dict[str, Any], *, top: int) -> dict[str, Any]:
    """The last full report updated for the tables a partial plan (``new``: the tables an event
    named) planned again: their counts by status, debt, breaches, per source, rows and brief
    entries replaced. The pending-generations histogram stays the last full plan's."""
    if old is None or old.get("format") != REPORT_FORMAT or not _patchable(old):
        return new
    out = {**old, "at": new["at"], "requests": new["requests"], "seconds": new["seconds"], "partial": True}
    index = {k: v for k, v in old["index"].items() if _is_brief(v)}
    by = dict(old["by_status"])
    sources = {s["source"]: {**s, "by_status": dict(s["by_status"])} for s in old["sources"]}
    counts = dict(old["breaches"]["count"])
    planned = {r["table"]: r for r in new["top"]}
    planned.update({u: {"table": u} for u in new["index"] if u not in planned})
    debt, generations = finite(old.get("debt")) or 0.0, int(finite(old.get("unmerged_generations")) or 0)
    for uri in planned:
        before = index.pop(uri, ["idle", 0.0, None, [], 0, None])
        after = new["index"].get(uri) or ["idle", 0.0, before[2], [], 0, None]
        by[before[0]] = by.get(before[0], 0) - 1
        by[after[0]] = by.get(after[0], 0) + 1
        debt += after[1] - before[1]
        generations += after[4] - before[4]
        for slo in before[3]:
            counts[slo] = counts.get(slo, 0) - 1
        for slo in after[3]:
            counts[slo] = counts.get(slo, 0) + 1
        src = sources.get(str(after[2]))
        if src is not None:
            src["by_status"][before[0]] = src["by_status"].get(before[0], 0) - 1
            src["by_status"][after[0]] = src["by_status"].get(after[0], 0) + 1
            src["debt"] = round(src["debt"] + after[1] - before[1], 2)
        if after[0] != "idle":
            index[uri] = after
    rows = [r for r in old["top"] if isinstance(r, Mapping) and isinstance(r.get("table"), str)
            and r["table"] not in planned] + list(new["top"])
    rows.sort(key=lambda r: (-(finite(r.get("debt")) or 0.0), -(finite(mapping_of(r.get("holds")).get(
        "oldest_unmerged_age_seconds")) or 0.0), str(r.get("table"))))
    named = [b for b in old["breaches"]["named"] if isinstance(b, Mapping) and isinstance(b.get("table"), str)
             and b["table"] not in planned]
    named += new["breaches"]["named"]
    ages = [v[5] for v in index.values() if v[5]]
    out.update(by_status=by, debt=round(debt, 2), unmerged_generations=generations, index=index, top=rows[:top],
               sources=sorted(sources.values(), key=lambda s: (-s["debt"], s["source"])),
               oldest_unmerged_age_seconds=max(ages, default=None),
               breaches={"count": counts, "tables": len({u for u, v in index.items() if v[3]}),
                         "named": named[:MAX_NAMED]})
    return out


def _counts(value: Any) -> bool:
    return isinstance(value, Mapping) and all(isinstance(v, int) and not isinstance(v, bool) for v in value.values())


def _is_brief(v: Any) -> bool:
    """Whether a stored ``index`` entry is a :func:`_brief` list of its types."""
    return (isinstance(v, list) and len(v) == 6 and isinstance(v[0], str) and finite(v[1]) is not None
            and isinstance(v[3], list) and all(isinstance(b, str) for b in v[3]) and isinstance(v[4], int)
            and not isinstance(v[4], bool) and (v[5] is None or finite(v[5]) is not None))


def _patchable(old: Mapping[str, Any]) -> bool:
    """Whether a stored report has the shape :func:`patch_report` updates (storage is untrusted:
    one that has not is replaced by the partial plan's own, never a failed plan)."""
    breaches = old.get("breaches")
    return (_counts(old.get("by_status")) and isinstance(old.get("index"), Mapping)
            and isinstance(old.get("top"), list) and isinstance(breaches, Mapping) and _counts(breaches.get("count"))
            and isinstance(breaches.get("named"), list) and isinstance(old.get("sources"), list)
            and all(isinstance(s, Mapping) and isinstance(s.get("source"), str) and _counts(s.get("by_status"))
                    and finite(s.get("debt")) is not None for s in old["sources"]))


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


def save_report(state: FleetState, report: dict[str, Any]) -> dict[str, Any]:
    """The report as the last plan's, its totals added to the history (compare-and-swap)."""
    def change(doc: dict[str, Any]) -> dict[str, Any]:
        history = [q for p in doc.get("history") or [] if (q := _stored_point(p)) is not None]
        return {"report": report, "history": [*history, point_of(report)][-MAX_HISTORY:]}

    return state.update("plan.json", change)


def last_report(state: FleetState) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The last plan's report (None: no plan yet, or an unreadable one) and the history."""
    doc, _ = state.read("plan.json")
    report = doc.get("report")
    history = [q for p in doc.get("history") or [] if (q := _stored_point(p)) is not None]
    if not isinstance(report, dict) or report.get("format") != REPORT_FORMAT:
        return None, history
    return report, history


__all__ = ["MAX_HISTORY", "last_report", "patch_report", "point_of", "report_of", "save_report"]
