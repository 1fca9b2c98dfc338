"""Running a backfill: per table the jobs in order, tables concurrently, resumable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from memwal.actions import action
from memwal.backfill.state import DEFAULT_STATE_FILE, BackfillState, options_fingerprint
from memwal.backfill.tables import parse_jobs, unique_tables
from memwal.core.document import Document
from memwal.core.pool import parallel_map
from memwal.errors import BadInputError, MemWalError

# statuses of one (table, job); WAITING: it ran and did what it could, but time alone will
# let a rerun do more (a gc held by the reader grace period), so it is not recorded as done
DONE, WAITING, SKIPPED, FAILED, NOT_RUN = "done", "waiting", "skipped", "failed", "not-run"


@dataclass
class JobRun:
    table: str
    job: str
    status: str
    seconds: float = 0.0
    summary: str = ""
    error: str | None = None
    exit_code: int | None = None
    result: dict[str, Any] | None = None


@dataclass
class TableRun(Document):
    table: str
    jobs: list[JobRun] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(j.status == FAILED for j in self.jobs)

    @property
    def error(self) -> str | None:
        return next((f"{j.job}: {j.error}" for j in self.jobs if j.status == FAILED), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "status": "failed" if self.failed else "ok",
            "error": self.error,
            "jobs": [asdict(j) for j in self.jobs],
        }


@dataclass
class BackfillReport(Document):
    jobs: list[str]
    tables: list[TableRun]
    state_file: str
    seconds: float = 0.0

    @property
    def failed_tables(self) -> list[TableRun]:
        return [t for t in self.tables if t.failed]

    def counts(self) -> dict[str, int]:
        out = {DONE: 0, WAITING: 0, SKIPPED: 0, FAILED: 0, NOT_RUN: 0}
        for t in self.tables:
            for j in t.jobs:
                out[j.status] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "state_file": self.state_file,
            "seconds": round(self.seconds, 3),
            "summary": {"tables": len(self.tables), "tables_failed": len(self.failed_tables), **self.counts()},
            "failed_tables": [t.table for t in self.failed_tables],
            "tables": [t.to_dict() for t in self.tables],
        }


#: Runs one job: ``runner(job, table, **options)`` -> its ``--json`` document (memwal.actions.run_action).
Runner = Callable[..., dict[str, Any]]
#: Hears ``("start"|"end", JobRun)`` as jobs start and end (the CLI's progress display).
Progress = Callable[[str, JobRun], None]


def summarize(job: str, doc: dict[str, Any]) -> str:
    """One short phrase for a job's result document (the summary table's cell)."""
    if job == "merge":
        if doc.get("version") is None:
            return "nothing to merge"
        gens = sum(s["to_generation"] - s["from_generation"] + 1 for s in doc.get("shards", []))
        return f"v{doc['version']}: {gens} generations"
    if job == "catchup":
        if not doc.get("indexes"):
            return "no index to catch up"
        state = "recorded" if doc.get("all_recorded") else "not all recorded"
        return f"v{doc['version']}: {len(doc['indexes'])} indexes {state}" if doc.get("version") else state
    if job == "compact":
        if doc.get("version") is None:
            return "nothing to compact"
        return f"v{doc['version']}: {doc.get('fragments_before')} -> {doc.get('fragments_after')} fragments"
    if job == "snapshot":
        return f"v{doc['version']}" if doc.get("version") is not None else "unchanged"
    if job == "gc":
        return f"{len(doc.get('deleted', []))} deleted, {len(doc.get('blocked', []))} blocked"
    return "done"


def run_job(
    runner: Runner, table: str, job: str, storage_options: dict[str, str], engine: str, options: dict[str, Any]
) -> JobRun:
    """Run one job on one table; the outcome, never an exception (one table's failure must
    not stop the others). Failure is the action's own verdict (its ``problems``)."""
    started = time.monotonic()
    run = JobRun(table=table, job=job, status=DONE)
    try:
        doc = runner(job, table, storage_options, engine=engine, dry_run=False, **options)
        run.result = json.loads(json.dumps(doc, default=str))
        problems = action(job).problems(doc)  # the same verdict as the CLI's exit code
        if problems:
            run.status, run.error, run.exit_code = FAILED, "; ".join(problems), 1
        else:
            run.summary = summarize(job, doc)
            if doc.get("time_will_free"):
                run.status = WAITING
                run.summary += "; more becomes free after the reader grace period: rerun later"
    except MemWalError as exc:
        run.status, run.error, run.exit_code = FAILED, str(exc).strip() or type(exc).__name__, exc.exit_code
    except Exception as exc:  # noqa: BLE001 - one table's failure must not stop the others
        text = (str(exc).strip().splitlines() or [""])[0]
        run.status, run.error, run.exit_code = FAILED, f"{type(exc).__name__}: {text}".rstrip(": "), 1
    run.seconds = time.monotonic() - started
    return run


def run_backfill(
    tables: Sequence[str],
    jobs: Sequence[str],
    *,
    storage_options: dict[str, str] | None = None,
    engine: str = "local",
    concurrency: int = 1,
    state: BackfillState | None = None,
    restart: bool = False,
    job_options: dict[str, dict[str, Any]] | None = None,
    progress: Progress | None = None,
    runner: Runner | None = None,
) -> BackfillReport:
    """Run ``jobs`` over ``tables``; see the module docstring. ``progress(event, job_run)``
    is called with ``"start"`` and ``"end"`` from worker threads."""
    if runner is None:
        from memwal.actions import run_action as runner
    if concurrency < 1:
        raise BadInputError("--concurrency must be at least 1")
    tables = unique_tables(tables)
    if not tables:
        raise BadInputError("no table given")
    jobs = parse_jobs(list(jobs))
    state = state or BackfillState(DEFAULT_STATE_FILE)
    if restart:
        state.forget(tables)
    options = job_options or {}
    notify = progress or (lambda event, run: None)
    started = time.monotonic()

    def one_table(table: str) -> TableRun:
        out = TableRun(table=table)
        stopped_by: str | None = None
        for job in jobs:
            if stopped_by:
                run = JobRun(table, job, NOT_RUN, error=f"not run: {stopped_by} failed")
                out.jobs.append(run)
                notify("end", run)
                continue
            record = state.is_done(table, job)
            fingerprint = options_fingerprint(engine, options.get(job, {}))
            if record is not None and record.get("options", fingerprint) == fingerprint:
                earlier = record.get("summary") or ""
                summary = f"finished earlier ({earlier})" if earlier else "finished earlier"
                run = JobRun(table, job, SKIPPED, summary=summary)
                out.jobs.append(run)
                notify("end", run)
                continue
            notify("start", JobRun(table, job, "running"))
            run = run_job(runner, table, job, dict(storage_options or {}), engine, options.get(job, {}))
            if run.status == DONE:  # WAITING is not recorded: a rerun does the rest
                state.mark_done(
                    table,
                    job,
                    {"finished_at": time.time(), "summary": run.summary, "version": (run.result or {}).get("version"),
                     "options": fingerprint},
                )
            elif run.status == FAILED:
                stopped_by = job
            out.jobs.append(run)
            notify("end", run)
        return out

    results = parallel_map(one_table, tables, concurrency, name="memwal-backfill")
    return BackfillReport(jobs=jobs, tables=results, state_file=state.path, seconds=time.monotonic() - started)
