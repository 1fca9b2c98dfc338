"""The fleet's plan: every discovered table with its debt, its jobs and why, highest debt first.

Pure: it reads (listings, manifests, lease records of the tables that have work) and writes
nothing. A table that cannot be read is a problem of its own (``problems``); the others are
still planned. A Lance table without a MemWAL is skipped with the reason. Each table's
``status`` says what the fleet will do with it:

- ``idle``: nothing owed;
- ``behind``: jobs to run now (``jobs``);
- ``waiting``: jobs owed that only time frees (GC's grace period, a quiet-hours window):
  ``waiting`` names each with when it is due and why;
- ``held``: a job to run has a live lease holder (a run under way, or stuck);
- ``paused``: an operator paused it (``paused``: who, why, when); its owed jobs are withheld.

``breaches`` are the service levels it misses (:mod:`memwal.fleet.slo`). The document::

    {"discovered": N, "tables": [{"table", "debt", "jobs", "reasons", "state", "status", ...}],
     "skipped": [{"path", "reason"}], "problems": [{"table", "error"}]}

A table past its age target runs its merge (and the catch-up it brings) first; its other jobs
wait for a round where it is within its target.

:meth:`FleetPlan.with_work` is the order the work starts in: tables whose shards hold backlog
no live writer will drain first; then the tables past a service level, the oldest unmerged
generation furthest past its target first (earliest deadline first: under overload no table's
lag runs away while others are served, whatever its debt); then by debt; interleaved by quota
(:mod:`memwal.fleet.quota`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from memwal.core import clock as clocks
from memwal.core.document import Document
from memwal.core.pool import parallel_map
from memwal.errors import BadInputError, MemWalError, first_line
from memwal.fleet.controls import Controls, Pause
from memwal.fleet.debt import TableState, debt_of, writer_idle_of
from memwal.fleet.facts import TableFacts
from memwal.fleet.policy import Policy
from memwal.fleet.probe import probe
from memwal.fleet.quota import fair_order, group_of, shares
from memwal.fleet.slo import AGE, Breach, breaches_of
from memwal.fleet.sources import Discovery, Skipped, TableRef

if TYPE_CHECKING:
    from memwal.fleet.cache import ProbeCache
    from memwal.store import Store

#: Tables probed at once (object-store requests in flight; a local disk gains little past 2).
DEFAULT_WORKERS = 8
STATUSES = ("behind", "waiting", "held", "paused", "idle")
#: What a table past its age target runs before anything else: the merge and the catch-up it brings.
LAG_JOBS = ("merge", "catchup")


@dataclass(frozen=True)
class TablePlan:
    table: str
    source: str
    debt: float
    jobs: tuple[str, ...]
    reasons: tuple[str, ...]
    state: TableState
    ref: TableRef = field(repr=False, compare=False)
    facts: TableFacts = field(repr=False, compare=False)
    status: str = "idle"
    #: Jobs owed that wait (for time, or a quiet-hours window): job -> (when due, why).
    waiting: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    paused: Pause | None = None
    breaches: tuple[Breach, ...] = ()
    group: str = "default"
    #: The jobs a pause withholds (it would run them otherwise).
    withheld: tuple[str, ...] = ()

    @property
    def orphaned(self) -> bool:
        """Whether shards of it hold backlog with no live writer (drained first)."""
        return self.state.orphaned_shards > 0

    @property
    def overdue(self) -> float:
        """Seconds its oldest unmerged generation is past the age target (0 when it is within,
        or past the generations target only); -1 when it misses no service level."""
        if not self.breaches:
            return -1.0
        return max((b.value - b.target for b in self.breaches if b.slo == AGE), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "debt": self.debt, "jobs": list(self.jobs), "reasons": list(self.reasons),
                "state": self.state.to_dict(), "status": self.status, "source": self.source, "group": self.group,
                "waiting": {j: {"until": round(t, 3), "why": why} for j, (t, why) in self.waiting.items()},
                "paused": None if self.paused is None else self.paused.to_dict(),
                "breaches": [b.to_dict() for b in self.breaches]}


@dataclass(frozen=True)
class TableProblem:
    table: str
    error: str
    source: str = field(default="", compare=False)


@dataclass(frozen=True)
class FleetPlan(Document):
    tables: tuple[TablePlan, ...]
    skipped: tuple[Skipped, ...]
    problems: tuple[TableProblem, ...]
    #: Requests the plan sent to the tables' stores (listings and reads, lease records included),
    #: discovery aside.
    requests: int = 0
    seconds: float = 0.0
    at: float = 0.0
    #: Each quota group's share of the budget (the default group's included).
    shares: Mapping[str, float] = field(default_factory=dict)

    @property
    def discovered(self) -> int:
        return len(self.tables) + len(self.problems)

    @property
    def debt(self) -> float:
        return round(sum(t.debt for t in self.tables), 2)

    def with_work(self) -> list[TablePlan]:
        """The tables with jobs to run, in the order they start (see the module docstring)."""
        busy = [t for t in self.tables if t.jobs]
        busy.sort(key=lambda t: (not t.orphaned, -t.overdue))  # stable: by debt within each part
        return fair_order(busy, lambda t: t.group, self.shares or {"default": 1.0})

    def by_status(self) -> dict[str, int]:
        out = dict.fromkeys((*STATUSES, "problem"), 0)
        for t in self.tables:
            out[t.status] += 1
        out["problem"] += len(self.problems)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"discovered": self.discovered, "debt": self.debt, "by_status": self.by_status(),
                "tables": [t.to_dict() for t in self.tables],
                "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
                "problems": [{"table": p.table, "error": p.error} for p in self.problems],
                "requests": self.requests, "seconds": round(self.seconds, 3)}


def _held_leases(store: Store, jobs: tuple[str, ...], now: float) -> tuple[str, ...]:
    """The planned jobs whose lease a live holder has (only read for tables that have work): one
    listing of the lease folder, then the records of the planned jobs alone (the table's other
    leases do not change its state; on an object store each is a GET)."""
    from memwal.lease import LEASE_PREFIX, LIVE, describe_lease

    try:
        stored = {o.key.rsplit("/", 1)[-1].removesuffix(".json") for o in store.list(LEASE_PREFIX, recursive=False)
                  if o.key.endswith(".json")}
        infos = [describe_lease(store, job, now) for job in jobs if job in stored]
    except MemWalError:
        return ()
    return tuple(sorted(i.kind for i in infos if i is not None and i.state == LIVE))


def _fmt(at: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")


def plan_fleet(discovery: Discovery, policy: Policy, *, cache: ProbeCache | None = None, now: float | None = None,
               workers: int = DEFAULT_WORKERS, backoff: Mapping[str, Mapping[str, float]] | None = None,
               controls: Controls | None = None, last_gc: Mapping[str, Mapping[str, Any]] | None = None) -> FleetPlan:
    """Plan every discovered table (see the module docstring). ``backoff``: per table, job ->
    the time before which that job is not planned again; ``controls``: the pauses and quiet
    hours in force (default: the policy's); ``last_gc``: per table, what its last GC said kept
    its merged generations (GC's own ``wait``: :mod:`memwal.gc.wait`)."""
    from memwal.fleet.cache import ProbeCache
    from memwal.store import open_store

    started = time.monotonic()
    at = clocks.current()() if now is None else now
    cache = cache or ProbeCache()
    ctl = controls if controls is not None else policy.controls()

    def one(ref: TableRef) -> TablePlan | TableProblem | Skipped:
        try:
            store = open_store(ref.uri, dict(ref.storage_options))
            facts = probe(ref.uri, store, cache, latest=ref.latest, now=at)
        except BadInputError as exc:
            if "not a Lance table" in str(exc):
                return Skipped(ref.uri, "not a Lance table")
            return TableProblem(ref.uri, first_line(exc, ref.uri), ref.source)
        except Exception as exc:  # noqa: BLE001 - one table's failure must not stop the plan
            return TableProblem(ref.uri, first_line(exc, ref.uri), ref.source)
        if not facts.mem_wal:
            return Skipped(ref.uri, "a Lance table without a MemWAL index")
        tp = policy.for_table(ref.uri, ref.source)
        d = debt_of(facts, tp, at, backoff=(backoff or {}).get(ref.uri), last_gc=(last_gc or {}).get(ref.uri))
        waiting = dict(d.waiting)
        reasons = list(d.reasons)
        paused = ctl.paused(ref.uri, ref.source)
        jobs: tuple[str, ...] = ()
        if paused is not None:
            since = f" since {_fmt(paused.at)}" if paused.at else ""
            reasons.insert(0, f"paused by {paused.by}{since}: {paused.reason} ({len(d.jobs)} jobs withheld)")
        else:
            for job in d.jobs:
                until = ctl.quiet_until(ref.uri, ref.source, job, at)
                if until is None:
                    jobs += (job,)
                else:
                    waiting[job] = (until, f"{job}: quiet hours until {_fmt(until)}")
            if "merge" in jobs and any(b.slo == AGE for b in breaches_of(ref.uri, d.state, tp.slo)):
                for job in (j for j in jobs if j not in LAG_JOBS):  # past its service level: the lag first
                    waiting[job] = (at, f"{job}: after the merge (the table is past its service level)")
                jobs = tuple(j for j in jobs if j in LAG_JOBS)
        reasons += [why for _, why in waiting.values()]
        state = d.state
        if jobs:
            held = _held_leases(store, jobs, at)  # the probe's store: its count covers both
            state, facts = replace(state, leases_held=held), replace(facts, requests=store.requests_sent)
        breaches = breaches_of(ref.uri, state, tp.slo)
        reasons += [b.describe() for b in breaches]
        if state.orphaned_shards:
            reasons.append(f"no live writer: {state.orphaned_shards} shards with unmerged generations unwritten for "
                           f"{writer_idle_of(tp):.0f} s or more (drained first)")
        reasons += [f"problem: {p}" for p in facts.problems]
        status = ("paused" if paused is not None else "held" if set(jobs) & set(state.leases_held)
                  else "behind" if jobs else "waiting" if waiting else "idle")
        return TablePlan(ref.uri, ref.source, d.debt, jobs, tuple(reasons), state, ref, facts, status, waiting,
                         paused, breaches, group_of(policy.quotas, ref.uri, ref.source),
                         d.jobs if paused is not None else ())

    results = parallel_map(one, list(discovery.tables), workers, name="memwal-fleet-plan")
    tables = sorted((r for r in results if isinstance(r, TablePlan)), key=rank)
    problems = [r for r in results if isinstance(r, TableProblem)]
    problems += [TableProblem(p.source, p.error, p.source) for p in discovery.problems]
    skipped = list(discovery.skipped) + [r for r in results if isinstance(r, Skipped)]
    requests = sum(t.facts.requests for t in tables)
    return FleetPlan(tuple(tables), tuple(skipped), tuple(problems), requests, time.monotonic() - started, at,
                     shares(policy.quotas))


def rank(t: TablePlan) -> tuple[float, float, int, str]:
    """Highest debt first; ties by the oldest unmerged generation, then the most unmerged bytes."""
    st = t.state
    return (-t.debt, -(st.oldest_unmerged_age_seconds or 0.0), -st.unmerged_bytes, t.table)


def check_sources_yield_tables(plan: FleetPlan, sources: list[str]) -> None:
    """A source that yields no MemWAL table (only plain Lance tables, stray folders) is bad
    input, never silence; one whose tables could not be read is a problem, not bad input."""
    for source in sources:
        if not any(t.source == source for t in plan.tables) and not any(p.source == source for p in plan.problems):
            raise BadInputError(f"source {source}: holds no MemWAL table (memwal fleet plan --json lists what was "
                                "skipped and why)")


__all__ = ["DEFAULT_WORKERS", "STATUSES", "FleetPlan", "TablePlan", "TableProblem", "check_sources_yield_tables",
           "plan_fleet", "rank"]
