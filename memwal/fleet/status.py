"""The fleet's view: every table counted by state, the top N ranked by debt with their lag and
last run. Bounded at any size: the plan's cheap reads for all tables, one history read for
each of the top N only, and the page and document list the top N alone.

States: ``idle`` (no job needed), ``behind`` (jobs planned), ``held`` (a planned job's lease
has a live holder: a run is under way or stuck), ``problem`` (the table could not be read).
The gauges ``memwal.fleet.tables`` and ``memwal.fleet.debt``, and each listed table's
``memwal.table.*`` gauges (by its full URI), are published as the view is made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memwal.core import clock as clocks
from memwal.core.document import Document
from memwal.core.pool import parallel_map
from memwal.core.text import clip
from memwal.fleet.plan import FleetPlan, TablePlan, plan_fleet
from memwal.fleet.policy import Policy
from memwal.fleet.probe import ProbeCache
from memwal.fleet.sources import discover
from memwal.observe.metrics import record_fleet, record_table

STATES = ("behind", "held", "problem", "idle")


@dataclass(frozen=True)
class LastRun:
    job: str
    outcome: str
    started_at: float
    error: str | None


@dataclass(frozen=True)
class TableLine:
    table: str
    state: str
    debt: float
    jobs: tuple[str, ...]
    reasons: tuple[str, ...]
    lag_generations: int
    lag_seconds: float | None
    last_run: LastRun | None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "state": self.state, "debt": self.debt, "jobs": list(self.jobs),
                "reasons": list(self.reasons), "lag_generations": self.lag_generations,
                "lag_seconds": self.lag_seconds, "error": self.error,
                "last_run": None if self.last_run is None else self.last_run.__dict__}


@dataclass(frozen=True)
class FleetStatus(Document):
    discovered: int
    by_state: Mapping[str, int]
    debt: float
    top: tuple[TableLine, ...]
    skipped: int
    problems: tuple[tuple[str, str], ...]
    now: float

    def to_dict(self) -> dict[str, Any]:
        return {"discovered": self.discovered, "by_state": dict(self.by_state), "debt": self.debt,
                "skipped": self.skipped, "tables": [t.to_dict() for t in self.top],
                "problems": [{"table": t, "error": e} for t, e in self.problems]}

    def render(self) -> str:
        counts = ", ".join(f"{self.by_state.get(s, 0)} {s}" for s in STATES)
        lines = [f"{self.discovered} tables ({counts}), total debt {self.debt:g}; {self.skipped} skipped"]
        for t in self.top:
            last = "-" if t.last_run is None else f"{t.last_run.job} {t.last_run.outcome}"
            age = "-" if t.lag_seconds is None else f"{t.lag_seconds:.0f}s"
            lines.append(f"  {t.debt:>8g}  {t.state:<7} lag {t.lag_generations:>4} gens {age:>6}  last {last:<20} "
                         f"{t.table}" + (f"  ({clip(t.error, 200)})" if t.error else ""))
        if len(self.top) < self.discovered:
            lines.append(f"  ({self.discovered - len(self.top)} more not listed: --top N)")
        return "\n".join(lines)


def _state(t: TablePlan) -> str:
    if not t.jobs:
        return "idle"
    return "held" if set(t.jobs) & set(t.state.leases_held) else "behind"


def _last_run(t: TablePlan) -> LastRun | None:
    from memwal.history.log import read_runs
    from memwal.store import open_store

    try:
        runs = list(read_runs(open_store(t.table, dict(t.ref.storage_options)), limit=1, detail=False))
    except Exception:  # noqa: BLE001 - the view goes on without it
        return None
    if not runs:
        return None
    r = runs[0]
    return LastRun(r.job, r.outcome, r.started_at, clip(r.error, 300) if r.error else None)


def status_of(plan: FleetPlan, *, top: int, workers: int = 8, now: float | None = None) -> FleetStatus:
    """The view of a plan (the top ``top`` tables get their last run read)."""
    at = clocks.current()() if now is None else now
    counts = dict.fromkeys(STATES, 0)
    for t in plan.tables:
        counts[_state(t)] += 1
    counts["problem"] += len(plan.problems)
    ranked = list(plan.tables[:top])
    lasts = parallel_map(_last_run, ranked, workers, name="memwal-fleet-status")
    lines = []
    for t, last in zip(ranked, lasts, strict=True):
        st = t.state
        lines.append(TableLine(t.table, _state(t), t.debt, t.jobs, t.reasons, st.unmerged_generations,
                               st.oldest_unmerged_age_seconds, last))
        record_table(t.table, generations=st.unmerged_generations, oldest_seconds=st.oldest_unmerged_age_seconds or 0.0,
                     debt=t.debt)
    room = max(0, top - len(lines))
    lines += [TableLine(p.table, "problem", 0.0, (), (), 0, None, None, p.error) for p in plan.problems[:room]]
    record_fleet(counts, plan.debt)
    return FleetStatus(plan.discovered, counts, plan.debt, tuple(lines), len(plan.skipped),
                       tuple((p.table, p.error) for p in plan.problems), at)


def fleet_status(sources: Sequence[str], *, policy: Policy | None = None,
                 storage_options: Mapping[str, str] | None = None,
                 namespace_properties: Mapping[str, str] | None = None, top: int = 50,
                 workers: int = 8, cache: ProbeCache | None = None, listed: Sequence[str] = ()) -> FleetStatus:
    """The fleet's view of ``sources`` (see the module docstring); ``listed``: the sources that
    are lines of a tables file (memwal.fleet.sources.discover)."""
    known = cache.known_tables() if cache is not None else frozenset()
    plan = plan_fleet(discover(sources, storage_options=storage_options, namespace_properties=namespace_properties,
                               known=known, listed=listed), policy or Policy(), workers=workers, cache=cache)
    return status_of(plan, top=top, workers=workers)


__all__ = ["STATES", "FleetStatus", "LastRun", "TableLine", "fleet_status", "status_of"]
