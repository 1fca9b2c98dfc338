"""Running a fleet: plan, run the planned work in debt order under a budget, plan again.

A round plans every table (:func:`memwal.fleet.plan.plan_fleet`), then runs the tables that
have work, highest debt first, ``workers`` tables at a time, each table's planned jobs in
cycle order through the one cycle runner (:func:`memwal.cycle.run_cycle_at`): every job is
a ``memwal <job>`` run, with its leases, its history record, its own verdict. A table's
failure stays with it; a job whose lease another holder has is ``held`` (skipped, with the
reason). The policy bounds each job's batch (``--max-generations``, ``--max-fragments``),
so no table waits behind one huge one.

Rounds go on until a round finds no work, or does none (everything it ran was held,
waiting or had nothing to do), or ``max_seconds`` passes: no table is started after it. A
job that ran and found nothing to do is not planned again for that table until the table
changes (its probe fingerprint), nor is one that failed without committing anything; a GC
that waits for time is not planned again before the policy's ``gc_retry_seconds``; a table's
whole GC is spaced by what its last one in this run took, GC's listing pass standing in for it
meanwhile (:func:`_spaced_gc`), and a follower spaces a table's whole GC and catch-up by its
cadences too, as a table follower does (:class:`Spacing`); a table
an operator cancelled (``memwal fleet cancel``) is not started again by this run. An idle
fleet runs nothing and so commits nothing.

A follower (``memwal fleet run --follow``, :mod:`memwal.follow.fleet`) hands a ``between``:
where a run would end (a round found no work, or did none), it waits and says whether to plan
again. A follower's result keeps its last :data:`FOLLOW_ROUNDS` rounds only, and it writes the
state's report and run log at most every :data:`FOLLOW_SAVE_SECONDS` (it plans every few seconds).

With a state folder (:mod:`memwal.fleet.state`) each round plans with the fleet's shared
state (:func:`memwal.fleet.shared.plan_shared`: the cache, the pauses, the waits, the last
plan's report) and leaves its tables' outcomes in the run log (:mod:`memwal.fleet.runs`).

Tables run on a :class:`TableRunner`: threads in this process (``local``), or, on the
``spark`` or ``ray`` engine, small tables as tasks of one job (a table per task, the local
engine inside) and tables above the policy's ``spark_min_bytes`` through the engine's per-table
engines on the driver (``memwal.tasks.fleet``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

from memwal.actions import ACTIONS
from memwal.actions.options import LISTING_PASS
from memwal.core import clock as clocks
from memwal.core.defaults import GC_SHARE
from memwal.core.document import Document
from memwal.cycle import CycleResult, JobStatus, parse_jobs, run_cycle_at
from memwal.cycle.outcome import gc_freed, gc_frees_at, gc_wait
from memwal.fleet.cache import ProbeCache
from memwal.fleet.plan import FleetPlan, TablePlan, check_sources_yield_tables
from memwal.fleet.policy import Policy, TablePolicy
from memwal.fleet.shared import plan_shared
from memwal.fleet.sources import Discovery, discover
from memwal.fleet.state import FleetState
from memwal.table.kept import KeptTables

log = logging.getLogger(__name__)

#: Rounds a follower's result keeps (its tally counts them all: memwal.follow.result).
FOLLOW_ROUNDS = 8
#: A follower writes the state's report and run log at most this often.
FOLLOW_SAVE_SECONDS = 30.0


@dataclass(frozen=True)
class TableWork:
    """One table's planned jobs, with the options they run with (plain data: it travels)."""

    table: str
    source: str
    debt: float
    jobs: tuple[str, ...]
    options: Mapping[str, Mapping[str, Any]]
    storage_options: Mapping[str, str] = field(repr=False)
    #: Large enough for the per-table Spark engines (the spark runner only).
    large: bool = False
    #: A namespace table's id: where it runs, its credentials are asked of the namespace again.
    namespace_id: tuple[str, ...] = ()

    def to_dict(self, *, storage_options: bool = False) -> dict[str, Any]:
        """Plain JSON data; the storage options (credentials) only when asked for, for a
        private file, never for a document that is stored or shown (an Airflow XCom)."""
        doc: dict[str, Any] = {"table": self.table, "source": self.source, "debt": self.debt, "jobs": list(self.jobs),
                               "options": {j: dict(o) for j, o in self.options.items()}, "large": self.large,
                               "namespace_id": list(self.namespace_id)}
        if storage_options:
            doc["storage_options"] = dict(self.storage_options)
        return doc

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], storage_options: Mapping[str, str] | None = None) -> TableWork:
        """The work a :meth:`to_dict` document describes; ``storage_options`` over its own."""
        options = {**dict(doc.get("storage_options") or {}), **dict(storage_options or {})}
        return cls(str(doc["table"]), str(doc.get("source") or ""), float(doc.get("debt") or 0.0),
                   tuple(str(j) for j in doc["jobs"]), {str(j): dict(o) for j, o in dict(doc["options"]).items()},
                   {str(k): str(v) for k, v in options.items()}, bool(doc.get("large")),
                   tuple(str(x) for x in doc.get("namespace_id") or ()))


def run_table_work(work: TableWork, tables: KeptTables | None = None) -> CycleResult:
    """Run one table's work: options validated here too, so a task on an executor refuses
    what the driver would. ``tables``: the table objects this process keeps across rounds."""
    options = {job: ACTIONS[job].options.from_kwargs(**dict(work.options.get(job, {}))) for job in work.jobs}
    return run_cycle_at(work.table, work.storage_options, work.jobs, options, tables=tables)


class TableRunner(Protocol):
    name: str

    def run(self, work: Sequence[TableWork], workers: int, deadline: float | None) -> Iterator[CycleResult]:
        """Run each table's work (in the given order, at most ``workers`` at once), starting
        none after the monotonic ``deadline``; yield each table's result as it ends."""
        ...


class LocalTableRunner:
    """Tables on threads of this process, the local engine inside; each table's object kept from
    one round to the next (:class:`memwal.table.kept.KeptTables`), as a table follower keeps its own."""

    name = "local"

    def __init__(self) -> None:
        self.tables = KeptTables()

    def run(self, work: Sequence[TableWork], workers: int, deadline: float | None) -> Iterator[CycleResult]:
        queue = list(work)
        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="memwal-fleet") as pool:
            running: set[Future[CycleResult]] = set()
            while queue or running:
                while queue and len(running) < workers and (deadline is None or time.monotonic() < deadline):
                    running.add(pool.submit(run_table_work, queue.pop(0), self.tables))
                if not running:
                    return  # past the deadline: the rest waits for the next run
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for f in done:
                    yield f.result()


def table_runner(engine: str) -> TableRunner:
    if engine == "local":
        return LocalTableRunner()
    from memwal.actions.engines import plugged

    runner: TableRunner = plugged(engine).engine("fleet")
    return runner


def options_for(policy: TablePolicy, job: str, *, engine: str, dry_run: bool) -> dict[str, Any]:
    """A job's options under the table's policy: its own options, the batch bounds, the engine."""
    out: dict[str, Any] = dict(policy.options.get(job, {}))
    if job == "merge":
        out.setdefault("max_generations", policy.batch.max_generations)
        out.setdefault("max_rows", policy.batch.max_rows)
    if job == "compact":
        out.setdefault("max_fragments", policy.batch.max_fragments)
    out.update(engine=engine, dry_run=dry_run)
    return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True)
class Round:
    number: int
    plan: FleetPlan
    results: tuple[CycleResult, ...]


@dataclass(frozen=True)
class FleetRunResult(Document):
    rounds: tuple[Round, ...]
    seconds: float
    engine: str
    dry_run: bool
    #: Tables planned but not started before ``max_seconds``.
    not_started: tuple[str, ...] = ()
    #: The tables the last round ran, planned again after it (None: the run ended on a plan
    #: made after its work, or it was a dry run).
    after: FleetPlan | None = None

    @property
    def results(self) -> list[CycleResult]:
        return [r for rnd in self.rounds for r in rnd.results]

    @property
    def failed(self) -> list[CycleResult]:
        """The tables whose last cycle of this run failed (each once)."""
        last = {r.table: r for r in self.results}
        return [r for r in last.values() if r.failed is not None]

    @property
    def problems(self) -> list[str]:
        last = self.rounds[-1].plan if self.rounds else None
        return [f"{p.table}: {p.error}" for p in (last.problems if last else ())]

    def counts(self) -> dict[str, int]:
        out = {str(s): 0 for s in JobStatus}
        for r in self.results:
            for j in r.jobs:
                out[str(j.status)] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        last = self.rounds[-1].plan if self.rounds else None
        return {
            "engine": self.engine, "dry_run": self.dry_run, "rounds": len(self.rounds),
            "seconds": round(self.seconds, 3), "summary": self.counts(),
            "failed_tables": [r.table for r in self.failed], "problems": self.problems,
            "not_started": list(self.not_started),
            "runs": [{"round": rnd.number, **r.to_dict()} for rnd in self.rounds for r in rnd.results],
            "plan": last.to_dict() if last is not None else None,
            "after": self.after.to_dict() if self.after is not None else None,
        }


Notify = Callable[[str, Any], None]
#: A follower's wait between rounds: ``between(progressed)`` -> plan again (see the module docstring).
Between = Callable[[bool], bool]


def run_fleet(sources: Sequence[str], *, policy: Policy | None = None, storage_options: Mapping[str, str] | None = None,
              namespace_properties: Mapping[str, str] | None = None, workers: int = 2,
              max_seconds: float | None = None, jobs: Sequence[str] | None = None, engine: str = "local",
              dry_run: bool = False, max_rounds: int | None = None, cache: ProbeCache | None = None,
              notify: Notify | None = None, runner: TableRunner | None = None, state: FleetState | None = None,
              top: int = 50, listed: Sequence[str] = (), partial: bool | None = None,
              between: Between | None = None, every: Mapping[str, float] | None = None) -> FleetRunResult:
    """Run the fleet (see the module docstring); ``notify("round", plan)`` and
    ``notify("table", CycleResult)`` as rounds are planned and tables end, and once
    ``notify("unmatched", lines)``: the policy's keys that match no table (logged without ``notify``). ``listed``: the
    sources that are lines of a tables file (memwal.fleet.sources.discover). ``partial``: as
    :func:`memwal.fleet.shared.plan_shared` takes it (None: these sources are part of the
    state's fleet when they leave out a source of its last report: the report is updated for
    their tables, not replaced). When the run ends on a round that ran tables, those are
    planned once more, so the state's last report shows what the run left, not what it found.
    ``between``: a follower's wait (see the module docstring); ``every``: its cadences (:class:`Spacing`)."""
    started = time.monotonic()
    deadline = None if max_seconds is None else started + max_seconds
    policy = policy or Policy()
    wanted = set(parse_jobs(list(jobs) if jobs else None))
    cache = cache or (ProbeCache.of_state(state) if state is not None else ProbeCache())
    runner = runner or table_runner(engine)
    hear = notify or (lambda event, value: None)
    backoff: dict[str, dict[str, float]] = {}
    quiet: dict[tuple[str, str], str] = {}  # (table, job) -> the fingerprint at which it found nothing to do
    spacing = Spacing(dict(every or {}))
    rounds: list[Round] = []
    not_started: tuple[str, ...] = ()
    def found(known: frozenset[str], exclude: frozenset[str]) -> Any:
        return discover(sources, storage_options=storage_options, namespace_properties=namespace_properties,
                        known=known, exclude=exclude, listed=listed)

    number, saved_at, unsaved = 0, float("-inf"), Unsaved()
    while True:
        number += 1
        save = not dry_run and (between is None or time.monotonic() - saved_at >= FOLLOW_SAVE_SECONDS)
        saved_at = time.monotonic() if save else saved_at
        planned = plan_shared(found, policy, state=state, cache=cache, top=top, now=clocks.current()(),
                              backoff=backoff, save=save, partial=partial)
        plan = planned.plan
        if not rounds:
            check_sources_yield_tables(plan, list(sources))
            if planned.unmatched:
                if notify is None:
                    for line in planned.unmatched:
                        log.warning("%s", line)
                hear("unmatched", planned.unmatched)
        hear("round", plan)
        work = [w for t in plan.with_work()
                if (w := _work(t, policy, wanted, quiet, engine, dry_run, spacing)) is not None]
        if not work:
            rounds.append(Round(number, plan, ()))
            if _again(between, False, dry_run, deadline, max_rounds, number):
                continue
            break
        results = []
        for result in runner.run(work, workers, deadline):
            results.append(result)
            hear("table", result)
        ended = {r.table for r in results}
        not_started = tuple(w.table for w in work if w.table not in ended)
        rounds.append(Round(number, plan, tuple(results)))
        if between is not None:
            del rounds[:-FOLLOW_ROUNDS]
        progressed = _remember(results, plan, policy, backoff, quiet, spacing)
        if state is not None and not dry_run:
            now = clocks.current()()
            unsaved.add(results, gc_waits(results), {p.table: p.source for p in plan.tables})
            if save or between is None:
                unsaved.record(state, policy, now)
        if not progressed or (deadline is not None and time.monotonic() >= deadline) \
                or (max_rounds is not None and number >= max_rounds):
            if _again(between, progressed, dry_run, deadline, max_rounds, number):
                continue
            break
        if dry_run:
            break
    if state is not None and not dry_run:
        unsaved.record(state, policy, clocks.current()())
    after = None
    if rounds[-1].results and not dry_run:
        ran = {r.table for r in rounds[-1].results}
        refs = tuple(t.ref for t in rounds[-1].plan.tables if t.table in ran)
        after = plan_shared(lambda known, exclude: Discovery(refs, (), ()), policy, state=state, cache=cache, top=top,
                            backoff=backoff, partial=True).plan
    return FleetRunResult(tuple(rounds), time.monotonic() - started, engine, dry_run, not_started, after)


def _again(between: Between | None, progressed: bool, dry_run: bool, deadline: float | None,
           max_rounds: int | None, number: int) -> bool:
    """Whether a follower plans another round (after its wait) where a run would end."""
    if between is None or dry_run or (max_rounds is not None and number >= max_rounds):
        return False
    return (deadline is None or time.monotonic() < deadline) and between(progressed)


@dataclass
class Unsaved:
    """Tables' results not yet in the state's run log (a follower writes it every so often)."""

    results: list[CycleResult] = field(default_factory=list)
    waits: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def add(self, results: Sequence[CycleResult], waits: Mapping[str, Any], sources: Mapping[str, str]) -> None:
        self.results += results
        self.waits.update(waits)
        self.sources.update(sources)

    def record(self, state: FleetState, policy: Policy, now: float) -> None:
        if not self.results:
            return
        from memwal.fleet.runs import record_results

        record_results(state, self.results, now=now, retry_after=functools.partial(_retry, policy, self.sources),
                       gc_waits=self.waits)
        self.results, self.waits, self.sources = [], {}, {}


def gc_waits(results: Sequence[CycleResult]) -> dict[str, Any]:
    """Per table whose GC ran, what kept its merged generations: GC's own ``wait``
    (:func:`memwal.gc.wait.gc_wait`, judged by GC with the options the fleet gave it, when it
    ran; None: it kept none)."""
    out: dict[str, Any] = {}
    for r in results:
        gc = r.outcome("gc")
        if gc is not None and gc.document is not None and gc.status in (JobStatus.DONE, JobStatus.WAITING):
            wait = gc.document.get("wait")
            out[r.table] = dict(wait) if isinstance(wait, Mapping) else None
    return out


JOB_ORDER_ALL = tuple(ACTIONS)


def _retry(policy: Policy, sources: Mapping[str, str], table: str) -> float:
    """Seconds before a GC of ``table`` that waited for time is planned again."""
    return policy.for_table(table, sources.get(table, "")).thresholds.gc_retry_seconds


@dataclass
class Spacing:
    """When a table's jobs may run again in this run. Its whole GC: no sooner after the last than
    :data:`memwal.core.defaults.GC_SHARE` of the time between them (:func:`_spaced_gc`), nor, in a
    follower, than ``every["gc"]``, doubled after each whole GC that freed nothing
    (:func:`memwal.cycle.outcome.gc_freed`) up to ``every["gc_max"]`` or until the time its gates
    pass, as a table follower backs its own off (:mod:`memwal.follow.schedule`). A follower's other
    cadences (``every``: job -> seconds, its ``catchup_every``) space that job's runs on a table as a
    table follower spaces its own (:class:`memwal.follow.options.FollowOptions`). Planned by the
    policy's thresholds alone, a fleet follower ran the whole GC and catch-up after every merge of a
    table flushing every 10 s: 120 ms of CPU a flush, where a table follower spends some 45; spaced by
    a minute but never backed off, six tables of 4,140 versions beside writers that never stop spent
    a third of the follower's time in whole GCs that freed nothing (issue 82)."""

    every: Mapping[str, float] = field(default_factory=dict)
    #: table -> when its next whole GC may start (its listing pass stands in meanwhile).
    gc_at: dict[str, float] = field(default_factory=dict)
    #: table -> whole GCs in a row that freed nothing (a follower's: its cadence doubles with each).
    gc_idle: dict[str, int] = field(default_factory=dict)
    #: (table, job) -> when that job may run on that table again.
    at: dict[tuple[str, str], float] = field(default_factory=dict)

    def allows(self, table: str, job: str, now: float) -> bool:
        return now >= self.at.get((table, job), float("-inf"))

    def ran(self, table: str, job: str, seconds: float, now: float, doc: Mapping[str, Any] | None = None) -> None:
        """``job`` ran on ``table`` for ``seconds``, ending at ``now`` (the clock's time), its
        document ``doc``."""
        if job == "gc":
            self.gc_at[table] = now + max(seconds / GC_SHARE, self._gc_cadence(table, now, doc or {}))
        elif job in self.every:
            self.at[(table, job)] = now + self.every[job]

    def _gc_cadence(self, table: str, now: float, doc: Mapping[str, Any]) -> float:
        cadence = self.every.get("gc", 0.0)
        if "gc_max" not in self.every:  # a run's rounds: spaced by what the last took alone
            return cadence
        idle = self.gc_idle[table] = 0 if gc_freed(doc) else self.gc_idle.get(table, 0) + 1
        frees_at = gc_frees_at(doc)
        return gc_wait(cadence, self.every["gc_max"], idle, None if frees_at is None else frees_at - now)


def _work(t: TablePlan, policy: Policy, wanted: set[str], quiet: Mapping[tuple[str, str], str], engine: str,
          dry_run: bool, spacing: Spacing) -> TableWork | None:
    now = clocks.current()()
    jobs = tuple(j for j in t.jobs if j in wanted and quiet.get((t.table, j)) not in (t.facts.fingerprint, "")
                 and spacing.allows(t.table, j, now))
    work = work_for(t, policy, jobs, engine=engine, dry_run=dry_run)
    return work if work is None or now >= spacing.gc_at.get(t.table, float("-inf")) else _spaced_gc(t, work)


def _spaced_gc(t: TablePlan, work: TableWork) -> TableWork | None:
    """``work`` while the table's whole GC is spaced (:func:`_remember`: no sooner after the last
    than :data:`memwal.core.defaults.GC_SHARE` of the time between them, as a table follower
    spaces its own): GC is its listing pass, which rolls up what merged and walks only the listed
    folders, when a merge runs or merged generations are listed; else it waits for its time.

    A whole GC names every folder the version retention keeps (a week beside a writer flushing 35
    a minute is 350,000): after every merge of a run's rounds, its cost grew with the table's age."""
    if "gc" not in work.jobs:
        return work
    if "merge" in work.jobs or any(s.listed_merged for s in t.facts.shards):
        options = {**work.options, "gc": {**work.options.get("gc", {}), **LISTING_PASS}}
        return dataclasses.replace(work, options=options)
    jobs = tuple(j for j in work.jobs if j != "gc")
    return dataclasses.replace(work, jobs=jobs, options={j: o for j, o in work.options.items() if j in jobs}) \
        if jobs else None


def work_for(t: TablePlan, policy: Policy, jobs: Sequence[str], *, engine: str, dry_run: bool) -> TableWork | None:
    """A planned table's work: ``jobs`` (of its planned ones) with the options its policy gives
    them (None: no job)."""
    if not jobs:
        return None
    tp = policy.for_table(t.table, t.source)
    return TableWork(t.table, t.source, t.debt, tuple(jobs),
                     {j: options_for(tp, j, engine=engine, dry_run=dry_run) for j in jobs},
                     dict(t.ref.storage_options), large=t.state.unmerged_bytes >= tp.spark_min_bytes,
                     namespace_id=t.ref.namespace_id)


def _remember(results: Sequence[CycleResult], plan: FleetPlan, policy: Policy, backoff: dict[str, dict[str, float]],
              quiet: dict[tuple[str, str], str], spacing: Spacing) -> bool:
    """Note what not to plan again soon; whether the round did any work (committed or deleted).
    A whole GC spaces the table's next by what it took (:func:`_spaced_gc`)."""
    now = clocks.current()()
    fingerprints = {t.table: t.facts.fingerprint for t in plan.tables}
    sources = {t.table: t.source for t in plan.tables}
    progressed = False
    for r in results:
        for j in r.jobs:
            doc = j.document or {}
            did = j.version is not None or bool(doc.get("deleted")) or bool(doc.get("wal_entries_deleted"))
            progressed |= did and j.status is JobStatus.DONE
            if r.cancelled is not None:
                continue
            listing = j.job == "gc" and bool(doc.get("listed_only"))
            if not listing and j.status in (JobStatus.DONE, JobStatus.WAITING):
                spacing.ran(r.table, j.job, j.seconds, now, doc)
            if listing and j.status is not JobStatus.FAILED:
                continue  # a spaced whole GC's stand-in: the whole one comes in its time, the table changed or not
            if j.status is JobStatus.WAITING and j.job == "gc":
                retry = policy.for_table(r.table, sources.get(r.table, "")).thresholds.gc_retry_seconds
                backoff.setdefault(r.table, {})["gc"] = now + retry
            elif j.status in (JobStatus.DONE, JobStatus.FAILED) and not did and r.table in fingerprints:
                quiet[(r.table, j.job)] = fingerprints[r.table]  # not again until the table changes
        if r.cancelled is not None:  # an operator stopped it: not again in this run
            quiet.update({(r.table, j): "" for j in JOB_ORDER_ALL})
    return progressed


__all__ = ["FOLLOW_ROUNDS", "FOLLOW_SAVE_SECONDS", "Between", "FleetRunResult", "LocalTableRunner", "Round",
           "TableRunner", "TableWork", "gc_waits", "options_for", "run_fleet", "run_table_work", "table_runner",
           "work_for"]
