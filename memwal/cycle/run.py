"""Running the maintenance cycle of one table: its jobs in cycle order, through ``memwal.actions``.

The one cycle runner: ``memwal cycle`` (and so ``spark-submit jobs/maintenance.py``),
``memwal backfill``, the Airflow maintenance operator and the fleet runner all call
:func:`run_cycle`, so a job's status means the same everywhere. A job runs exactly as
``memwal <job>`` runs it (:func:`memwal.actions.run`: plan, leases, execute that plan,
history record); whether it failed is the action's own verdict. The runner never raises for
one job: a failure is an outcome, the table's later jobs are not run, and a caller running
many tables goes on with the others.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memwal.actions import ACTIONS, run
from memwal.actions.options import JobOptions
from memwal.cycle.outcome import CycleResult, JobOutcome, JobStatus, summarize, waits_for_time
from memwal.errors import BadInputError, CancelledError, LeaseHeldError, MemWalError, first_line

if TYPE_CHECKING:
    from memwal.table import Table
    from memwal.table.kept import KeptTables

#: The jobs of a cycle, in the order a cycle runs them.
JOB_ORDER: tuple[str, ...] = tuple(ACTIONS)

#: Hears ``("start" | "end", outcome)`` as jobs start and end (a progress display, a log).
Notify = Callable[[str, JobOutcome], None]
#: Says why a job is not to run on a table (``None``: run it): a resumed backfill's record.
Skip = Callable[[str, str], str | None]


def parse_jobs(text: str | Sequence[str] | None) -> list[str]:
    """``"merge,gc"`` -> ``["merge", "gc"]`` in cycle order; an unknown name is bad input."""
    if text is None:
        return list(JOB_ORDER)
    items = text.split(",") if isinstance(text, str) else list(text)
    names = {s.strip() for s in items if s.strip()}
    unknown = sorted(names - set(JOB_ORDER))
    if unknown:
        raise BadInputError(f"unknown job {', '.join(unknown)}: expected some of {','.join(JOB_ORDER)}")
    if not names:
        raise BadInputError("no job given")
    return [j for j in JOB_ORDER if j in names]


def run_job(table: Table, job: str, options: JobOptions, *, plan: Any = None) -> JobOutcome:
    """Run one job on ``table`` (``plan``: its plan, made by the caller; None: the job plans);
    its outcome, never an exception (see the module docstring)."""
    started = time.monotonic()
    try:
        result = run(job, table, options, plan=plan)
    except LeaseHeldError as exc:
        return JobOutcome(table.uri, job, JobStatus.HELD, time.monotonic() - started,
                          summary=f"held: {first_line(exc)}", exit_code=exc.exit_code)
    except CancelledError as exc:
        return JobOutcome(table.uri, job, JobStatus.CANCELLED, time.monotonic() - started, summary=first_line(exc),
                          exit_code=exc.exit_code)
    except MemWalError as exc:
        return JobOutcome(table.uri, job, JobStatus.FAILED, time.monotonic() - started,
                          error=first_line(exc, table.uri), exit_code=exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - one table's failure must not stop the others
        return JobOutcome(table.uri, job, JobStatus.FAILED, time.monotonic() - started,
                          error=first_line(exc, table.uri), exit_code=1)
    seconds = time.monotonic() - started
    # plain JSON data: it travels and never aliases the result (GC's names at most a hundred it kept)
    doc = json.loads(json.dumps(result.summary_dict(), default=str))
    if result.problems:
        return JobOutcome(table.uri, job, JobStatus.FAILED, seconds, error="; ".join(result.problems), exit_code=1,
                          document=doc)
    summary = summarize(job, doc)
    if result.dry_run:
        return JobOutcome(table.uri, job, JobStatus.PLANNED, seconds, summary=summary, document=doc)
    if waits_for_time(job, doc):
        when = "with time" if doc.get("time_will_free") else "as writers go quiet or reopen, and with time"
        return JobOutcome(table.uri, job, JobStatus.WAITING, seconds, document=doc,
                          summary=f"{summary}; more becomes free {when}: rerun later")
    return JobOutcome(table.uri, job, JobStatus.DONE, seconds, summary=summary, document=doc)


def run_cycle(table: Table, jobs: Sequence[str], options: Mapping[str, JobOptions], *,
              notify: Notify | None = None, skip: Skip | None = None,
              plans: Mapping[str, Any] | None = None) -> CycleResult:
    """Run ``jobs`` (in cycle order) on ``table``, each with its options from ``options``
    (validated by the caller: a job without an entry runs with its defaults) and its plan from
    ``plans`` when the caller made one (a follower's merge), else its own."""
    from memwal.core import clock as clocks
    from memwal.lease import cancel

    hear = notify or (lambda event, outcome: None)
    out: list[JobOutcome] = []
    failed: str | None = None
    stopped: str | None = None
    since = clocks.current()()
    for job in parse_jobs(list(jobs)):
        request = cancel.cancelled(table.store.root, since)
        if stopped is None and request is not None:
            stopped = cancel.describe(request)
        if stopped is not None:
            outcome = JobOutcome(table.uri, job, JobStatus.NOT_RUN, summary=f"not run: {stopped}")
        elif failed is not None:
            outcome = JobOutcome(table.uri, job, JobStatus.NOT_RUN, error=f"not run: {failed} failed")
        elif skip is not None and (why := skip(table.uri, job)) is not None:
            outcome = JobOutcome(table.uri, job, JobStatus.SKIPPED, summary=why)
        else:
            hear("start", JobOutcome(table.uri, job, JobStatus.NOT_RUN, summary="running"))
            outcome = run_job(table, job, options.get(job) or ACTIONS[job].options(), plan=(plans or {}).get(job))
            if outcome.status is JobStatus.FAILED:
                failed = job
            elif outcome.status is JobStatus.CANCELLED:
                noticed = cancel.cancelled(table.store.root, since)
                stopped = cancel.describe(noticed) if noticed is not None else outcome.summary
        out.append(outcome)
        hear("end", outcome)
    return CycleResult(table.uri, tuple(out))


def run_cycle_at(uri: str, storage_options: Mapping[str, str] | None, jobs: Sequence[str],
                 options: Mapping[str, JobOptions], *, notify: Notify | None = None,
                 skip: Skip | None = None, tables: KeptTables | None = None) -> CycleResult:
    """:func:`run_cycle` on the table at ``uri``; a table that cannot be opened (gone, not a
    MemWAL table, unreachable) fails its first job, with the others not run. ``tables``: the
    table objects a long-lived run keeps across its rounds (a fleet's), lent for this cycle."""
    from memwal.table import open_table

    given = dict(storage_options or {})
    try:
        table = tables.lend(uri, given) if tables is not None else open_table(uri, given)
    except Exception as exc:  # noqa: BLE001 - one table's failure must not stop the others
        names = parse_jobs(list(jobs))
        code = exc.exit_code if isinstance(exc, MemWalError) else 1
        first = JobOutcome(uri, names[0], JobStatus.FAILED, error=first_line(exc, uri), exit_code=code)
        rest = tuple(JobOutcome(uri, j, JobStatus.NOT_RUN, error=f"not run: {names[0]} failed") for j in names[1:])
        for outcome in (first, *rest):
            (notify or (lambda event, o: None))("end", outcome)
        return CycleResult(uri, (first, *rest))
    try:
        return run_cycle(table, jobs, options, notify=notify, skip=skip)
    finally:
        if tables is not None:
            tables.give_back(uri, given, table)


__all__ = ["JOB_ORDER", "Notify", "Skip", "parse_jobs", "run_cycle", "run_cycle_at", "run_job"]
