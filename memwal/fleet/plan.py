"""The fleet's plan: every discovered table with its debt, its jobs and why, highest debt first.

Pure: it reads (listings, manifests, lease records of the tables that have work) and writes
nothing. A table that cannot be read is a problem of its own (``problems``); the others are
still planned. A Lance table without a MemWAL is skipped with the reason. The document::

    {"discovered": N, "tables": [{"table", "debt", "jobs", "reasons", "state"}],
     "skipped": [{"path", "reason"}], "problems": [{"table", "error"}]}
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
from memwal.fleet.debt import TableState, debt_of
from memwal.fleet.policy import Policy
from memwal.fleet.probe import ProbeCache, TableFacts, probe
from memwal.fleet.sources import Discovery, Skipped, TableRef

if TYPE_CHECKING:
    from memwal.store import Store

#: Tables probed at once (object-store requests in flight; a local disk gains little past 2).
DEFAULT_WORKERS = 8


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

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "debt": self.debt, "jobs": list(self.jobs), "reasons": list(self.reasons),
                "state": self.state.to_dict()}


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

    @property
    def discovered(self) -> int:
        return len(self.tables) + len(self.problems)

    @property
    def debt(self) -> float:
        return round(sum(t.debt for t in self.tables), 2)

    def with_work(self) -> list[TablePlan]:
        return [t for t in self.tables if t.jobs]

    def to_dict(self) -> dict[str, Any]:
        return {"discovered": self.discovered, "debt": self.debt,
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


def plan_fleet(discovery: Discovery, policy: Policy, *, cache: ProbeCache | None = None, now: float | None = None,
               workers: int = DEFAULT_WORKERS, backoff: Mapping[str, Mapping[str, float]] | None = None) -> FleetPlan:
    """Plan every discovered table (see the module docstring). ``backoff``: per table, job ->
    the time before which that job is not planned again."""
    from memwal.store import open_store

    started = time.monotonic()
    at = clocks.current()() if now is None else now
    cache = cache or ProbeCache()

    def one(ref: TableRef) -> TablePlan | TableProblem | Skipped:
        try:
            store = open_store(ref.uri, dict(ref.storage_options))
            facts = probe(ref.uri, store, cache)
        except BadInputError as exc:
            if "not a Lance table" in str(exc):
                return Skipped(ref.uri, "not a Lance table")
            return TableProblem(ref.uri, first_line(exc, ref.uri), ref.source)
        except Exception as exc:  # noqa: BLE001 - one table's failure must not stop the plan
            return TableProblem(ref.uri, first_line(exc, ref.uri), ref.source)
        if not facts.mem_wal:
            return Skipped(ref.uri, "a Lance table without a MemWAL index")
        d = debt_of(facts, policy.for_table(ref.uri, ref.source), at, backoff=(backoff or {}).get(ref.uri))
        state = d.state
        if d.jobs:
            held = _held_leases(store, d.jobs, at)  # the probe's store: its count covers both
            state, facts = replace(state, leases_held=held), replace(facts, requests=store.requests_sent)
        reasons = d.reasons + tuple(f"problem: {p}" for p in facts.problems)
        return TablePlan(ref.uri, ref.source, d.debt, d.jobs, reasons, state, ref, facts)

    results = parallel_map(one, list(discovery.tables), workers, name="memwal-fleet-plan")
    tables = sorted((r for r in results if isinstance(r, TablePlan)), key=lambda t: (-t.debt, t.table))
    problems = [r for r in results if isinstance(r, TableProblem)]
    problems += [TableProblem(p.source, p.error, p.source) for p in discovery.problems]
    skipped = list(discovery.skipped) + [r for r in results if isinstance(r, Skipped)]
    requests = sum(t.facts.requests for t in tables)
    return FleetPlan(tuple(tables), tuple(skipped), tuple(problems), requests, time.monotonic() - started)


def check_sources_yield_tables(plan: FleetPlan, sources: list[str]) -> None:
    """A source that yields no MemWAL table (only plain Lance tables, stray folders) is bad
    input, never silence; one whose tables could not be read is a problem, not bad input."""
    for source in sources:
        if not any(t.source == source for t in plan.tables) and not any(p.source == source for p in plan.problems):
            raise BadInputError(f"source {source}: holds no MemWAL table (memwal fleet plan --json lists what was "
                                "skipped and why)")


__all__ = ["DEFAULT_WORKERS", "FleetPlan", "TablePlan", "TableProblem", "check_sources_yield_tables", "plan_fleet"]
