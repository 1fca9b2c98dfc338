"""Every figure of the fleet's report from one place: each table's brief.

The report (:mod:`memwal.fleet.report`) keeps one *brief* per table it knows (``index``): its
status, debt, source, quota group, breaches, unmerged generations, oldest unmerged age, whether
it owes jobs, whether it is orphaned, and how many of its shards hold how many pending
generations. The fleet's counts, the breakdowns per source and per quota group, the breaches
and the pending-generations histogram are all sums over these briefs (:func:`totals`), for a
full plan, for a plan of a few tables patched into the last report, and for the pauses read
live: the header, the rows and every breakdown of the page and ``fleet status --json`` come
from the same briefs, never from an older sum (issue 64: a source said 160 unmerged where its
rows held 32, the histogram and the quota groups were the last full plan's).

A brief is a short list (:data:`FIELDS`), some 100 bytes a table: 2 MB at 20,000 tables.
Storage is untrusted: :func:`is_brief` checks each before it counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memwal.core.json_doc import finite
from memwal.fleet.plan import STATUSES
from memwal.fleet.slo import AGE, BOUNDS, GENERATIONS, histogram

if TYPE_CHECKING:
    from memwal.fleet.plan import TablePlan, TableProblem

#: What a brief holds, in order.
FIELDS = ("status", "debt", "source", "breaches", "unmerged_generations", "oldest_unmerged_age_seconds", "group",
          "owes_jobs", "orphaned", "pending", "policy_paused")
STATUS, DEBT, SOURCE, BREACHES, GENERATIONS_, AGE_, GROUP, OWES, ORPHANED, PENDING, POLICY_PAUSED = range(len(FIELDS))
#: The status of a table that could not be read (not one of the plan's statuses).
PROBLEM = "problem"


def brief_of(t: TablePlan) -> list[Any]:
    """A planned table's brief; ``pending``: ``[[bucket, shards], ...]`` of the histogram's
    buckets that hold any of its shards."""
    counts = histogram(len(s.unmerged) for s in t.facts.shards)["counts"]
    return [t.status, t.debt, t.source, [b.slo for b in t.breaches], t.state.unmerged_generations,
            t.state.oldest_unmerged_age_seconds, t.group, bool(t.jobs or t.withheld), t.orphaned,
            [[i, n] for i, n in enumerate(counts) if n], t.paused is not None and t.paused.origin == "policy"]


def problem_brief(p: TableProblem) -> list[Any]:
    return [PROBLEM, 0.0, p.source, [], 0, None, "", False, False, [], False]


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def is_brief(v: Any) -> bool:
    """Whether a stored ``index`` entry is a brief of the right types."""
    return (isinstance(v, list) and len(v) == len(FIELDS) and v[STATUS] in (*STATUSES, PROBLEM)
            and finite(v[DEBT]) is not None and isinstance(v[SOURCE], str) and isinstance(v[BREACHES], list)
            and all(b in (AGE, GENERATIONS) for b in v[BREACHES]) and _count(v[GENERATIONS_])
            and (v[AGE_] is None or finite(v[AGE_]) is not None) and isinstance(v[GROUP], str)
            and isinstance(v[OWES], bool) and isinstance(v[ORPHANED], bool) and isinstance(v[POLICY_PAUSED], bool)
            and isinstance(v[PENDING], list) and all(
                isinstance(p, list) and len(p) == 2 and _count(p[0]) and p[0] <= len(BOUNDS) and _count(p[1])
                for p in v[PENDING]))


def briefs(index: Any) -> dict[str, list[Any]]:
    """The well-formed briefs of a stored index (the others dropped)."""
    if not isinstance(index, Mapping):
        return {}
    return {str(k): v for k, v in index.items() if is_brief(v)}


def _older(a: float | None, b: Any) -> float | None:
    age = finite(b)
    return age if age is not None and (a is None or age > a) else a


def totals(index: Mapping[str, list[Any]], shares: Mapping[str, float]) -> dict[str, Any]:
    """The report's figures over these briefs: counts by status, debt, unmerged generations,
    the oldest unmerged age, orphaned tables, per source, per quota group (with ``shares``),
    the breaches' counts and the pending-generations histogram."""
    by = dict.fromkeys((*STATUSES, PROBLEM), 0)
    sources: dict[str, dict[str, Any]] = {}
    groups: dict[str, dict[str, Any]] = {}
    pending = [0] * (len(BOUNDS) + 1)
    counts = {AGE: 0, GENERATIONS: 0}
    debt, generations, oldest, orphaned, breached = 0.0, 0, None, 0, 0
    for b in index.values():
        status = b[STATUS]
        by[status] += 1
        s = sources.setdefault(b[SOURCE], {"source": b[SOURCE], "tables": 0, "by_status": dict.fromkeys(STATUSES, 0),
                                           "debt": 0.0, "unmerged_generations": 0,
                                           "oldest_unmerged_age_seconds": None, "breaches": 0, "problems": 0})
        if status == PROBLEM:
            s["problems"] += 1
            continue
        s["tables"] += 1
        s["by_status"][status] += 1
        s["debt"] += b[DEBT]
        s["unmerged_generations"] += b[GENERATIONS_]
        s["oldest_unmerged_age_seconds"] = _older(s["oldest_unmerged_age_seconds"], b[AGE_])
        s["breaches"] += bool(b[BREACHES])
        g = groups.setdefault(b[GROUP], {"group": b[GROUP], "share": shares.get(b[GROUP], 0.0), "tables": 0,
                                         "with_work": 0, "debt": 0.0})
        g["tables"] += 1
        g["with_work"] += status in ("behind", "held")  # jobs to run now
        g["debt"] += b[DEBT]
        debt += b[DEBT]
        generations += b[GENERATIONS_]
        oldest = _older(oldest, b[AGE_])
        orphaned += b[ORPHANED]
        breached += bool(b[BREACHES])
        for slo in b[BREACHES]:
            counts[slo] += 1
        for bucket, n in b[PENDING]:
            pending[bucket] += n
    for part in (*sources.values(), *groups.values()):
        part["debt"] = round(part["debt"], 2)
    problems = by.pop(PROBLEM)
    return {"discovered": len(index), "by_status": {**by, PROBLEM: problems}, "debt": round(debt, 2),
            "unmerged_generations": generations, "oldest_unmerged_age_seconds": oldest, "orphaned_tables": orphaned,
            "problem_count": problems,
            "sources": sorted(sources.values(), key=lambda s: (-s["debt"], s["source"])),
            "groups": sorted(groups.values(), key=lambda g: g["group"]),
            "breach_counts": counts, "breached_tables": breached,
            "histogram": {"bounds": list(BOUNDS), "counts": pending}}


__all__ = ["FIELDS", "PROBLEM", "brief_of", "briefs", "is_brief", "problem_brief", "totals"]
