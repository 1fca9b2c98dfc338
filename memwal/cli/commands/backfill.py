"""``memwal backfill (TABLE... | --tables-file F) [--jobs merge,catchup,compact,gc,snapshot] [job options] [--json]``.

Runs the chosen jobs over many tables (``memwal.backfill``): progress bars on a terminal
(plain lines when stderr is not one), then a summary table, or the JSON document with
``--json``. Resumable: finished (table, job) pairs are recorded in ``--state-file`` and
skipped by a rerun unless ``--restart``. Exit 1 when any table failed, naming each on stderr.
Every job's options (``--grace-seconds``, ``--expire-versions``, ``--max-generations``...)
are the same flags as the job's own command, derived from its options class.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from typing import TYPE_CHECKING, Any

from memwal.actions.options import JobOptions, option_names
from memwal.backfill.state import DEFAULT_STATE_FILE
from memwal.cli.commands.common import EXIT_FAILED, EXIT_OK, Subparsers, common_options, emit, positive_int
from memwal.cli.options import add_arguments
from memwal.core.text import one_line
from memwal.errors import BadInputError

if TYPE_CHECKING:  # the runs (memwal.backfill, memwal.cycle) load when the command runs, not for --help
    from memwal.actions.action import Action
    from memwal.backfill import BackfillReport, BackfillState
    from memwal.cycle import JobOutcome


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    help_text = "run maintenance jobs over many tables, resumably"
    p = sub.add_parser("backfill", parents=[common_options()], help=help_text, description=help_text)
    p.add_argument("tables", metavar="TABLE", nargs="*", help="table URIs (local paths or s3://bucket/prefix)")
    p.add_argument("--tables-file", metavar="F", help="file with one table URI per line (# comments; - for stdin)")
    p.add_argument(
        "--jobs",
        default=",".join(job_order()),
        metavar="LIST",
        help=f"comma-separated jobs, run in the order {', '.join(job_order())} (default: all)",
    )
    p.add_argument("--concurrency", type=positive_int, default=1, metavar="N", help="tables processed at once")
    p.add_argument(
        "--state-file",
        default=DEFAULT_STATE_FILE,
        metavar="PATH",
        help=f"where finished (table, job) pairs are recorded (default {DEFAULT_STATE_FILE})",
    )
    p.add_argument("--restart", action="store_true", help="forget the recorded progress of these tables first")
    p.add_argument("--dry-run", action="store_true", help="every job's dry run on every table; nothing written, "
                   "nothing recorded")
    add_job_arguments(p)
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.backfill import (
        BackfillState,
        parse_jobs,
        read_tables_file,
        run_backfill,
        table_uri_problem,
        unique_tables,
    )

    tables = list(args.tables)
    for uri in tables:  # the same check as the lines of --tables-file, before anything is written
        problem = table_uri_problem(uri.strip()) if uri.strip() else "empty table argument"
        if problem:
            raise BadInputError(problem)
    if args.tables_file:
        tables += read_tables_file(args.tables_file)
    tables = unique_tables(tables)
    if not tables:
        raise BadInputError("no table given: pass TABLE arguments or --tables-file")
    jobs = parse_jobs(args.jobs)
    state = BackfillState(args.state_file) if not args.restart else _fresh_state(args.state_file)
    job_options = job_options_from(args)
    if not args.debug:  # per-job lease/commit logs would drown the progress display
        for name in ("memwal",):
            logging.getLogger(name).setLevel(logging.WARNING)

    display = RichProgress(len(tables) * len(jobs)) if sys.stderr.isatty() else PlainProgress(len(tables) * len(jobs))
    with display:
        report = run_backfill(
            tables,
            jobs,
            storage_options=args.storage_options,
            engine=args.engine or "local",
            concurrency=args.concurrency,
            state=state,
            restart=args.restart,
            job_options=job_options,
            dry_run=args.dry_run,
            progress=display.update,
        )
    emit(args, report.to_dict(), lambda: render(report))
    for t in report.failed_tables:
        print(f"memwal: error: backfill of {t.table} failed: {one_line(t.error or '')}", file=sys.stderr)
    if report.failed_tables:
        names = ", ".join(t.table for t in report.failed_tables)
        print(
            f"memwal: error: {len(report.failed_tables)} of {len(report.tables)} tables failed: {names}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK


def _actions() -> dict[str, Action[Any, Any, Any, Any]]:
    from memwal.actions.registry import ACTIONS  # the actions' declarations, not their runs

    return ACTIONS


def job_order() -> tuple[str, ...]:
    """The jobs in the order a cycle runs them (``memwal.cycle.JOB_ORDER``, without importing the runner)."""
    return tuple(_actions())


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    """``--engine``, ``--lease-ttl`` and every job's own flags (no two jobs share a flag),
    for commands that run several jobs: backfill and the Spark maintenance cycle."""
    add_arguments(p, JobOptions, skip=("dry_run",))
    added: set[str] = set()
    for act in _actions().values():  # an option two jobs share (--lease-wait) is one flag for both
        own = option_names(act.options, common=False)
        add_arguments(p, act.options, common=False, skip=tuple(added))
        added |= set(own)


def job_options_from(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Per job, the options given on the command line (absent ones keep the job's defaults)."""
    out = {}
    for name, act in _actions().items():
        given = {k: getattr(args, k) for k in option_names(act.options, common=False) if getattr(args, k) is not None}
        if args.lease_ttl is not None:
            given["lease_ttl"] = args.lease_ttl
        out[name] = given
    return out


def _fresh_state(path: str) -> BackfillState:
    """``--restart`` must work even over an unreadable state file (it is what the error suggests)."""
    from memwal.backfill import BackfillState

    try:
        return BackfillState(path)
    except BadInputError:
        import os

        os.replace(path, path + ".corrupt")
        return BackfillState(path)


# -- progress ---------------------------------------------------------------------------
class PlainProgress:
    """One line per finished job on stderr (logs, CI, pipes)."""

    def __init__(self, total: int) -> None:
        self.total, self.count = total, 0
        self._lock = threading.Lock()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, event: str, run: JobOutcome) -> None:
        from memwal.cycle import JobStatus

        if event != "end":
            return
        with self._lock:
            self.count += 1
            detail = run.error if run.status in (JobStatus.FAILED, JobStatus.NOT_RUN) else run.summary
            took = f" in {run.seconds:.1f}s" if run.status in (JobStatus.DONE, JobStatus.PLANNED, JobStatus.FAILED) \
                else ""
            print(
                f"memwal backfill: [{self.count}/{self.total}] {run.table} {run.job}: {run.status}{took}"
                + (f" ({one_line(detail)})" if detail else ""),
                file=sys.stderr,
                flush=True,
            )


class RichProgress:
    """An overall bar plus one spinner line per running job, on a terminal."""

    def __init__(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(file=sys.stderr),
            transient=False,
        )
        self.overall = self.progress.add_task("backfill", total=total)
        self.running: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> RichProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, event: str, run: JobOutcome) -> None:
        from memwal.cycle import JobStatus

        with self._lock:
            key = (run.table, run.job)
            if event == "start":
                self.running[key] = self.progress.add_task(f"  {run.table} {run.job}", total=None)
                return
            task = self.running.pop(key, None)
            if task is not None:
                self.progress.remove_task(task)
            if run.status is JobStatus.FAILED:
                from rich.markup import escape

                self.progress.console.print(f"[red]failed[/red] {escape(run.table)} {run.job}: "
                                            f"{escape(one_line(run.error or ''))}")
            self.progress.advance(self.overall)


# -- summary ----------------------------------------------------------------------------
def render(report: BackfillReport) -> str:
    from memwal.cycle import JobStatus

    cell_of = {JobStatus.DONE: "done", JobStatus.PLANNED: "planned", JobStatus.WAITING: "waiting",
               JobStatus.HELD: "held", JobStatus.SKIPPED: "skipped", JobStatus.FAILED: "FAILED",
               JobStatus.NOT_RUN: "not run", JobStatus.CANCELLED: "cancelled"}
    header = ["table", *report.jobs, "time"]
    rows = [header]
    for t in report.tables:
        cells = [t.table]
        for job in report.jobs:
            j = t.outcome(job)
            if j is None:
                cells.append("-")
                continue
            cell = cell_of[j.status]
            if j.status in (JobStatus.DONE, JobStatus.PLANNED, JobStatus.WAITING, JobStatus.HELD) and j.summary:
                cell += f" ({j.summary})"
            cells.append(cell)
        cells.append(f"{sum(j.seconds for j in t.jobs):.1f}s")
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    c = report.counts()
    failed = report.failed_tables
    lines.append(
        f"{len(report.tables) - len(failed)} of {len(report.tables)} tables ok; jobs: "
        + (f"{c[JobStatus.PLANNED]} planned (dry run: nothing written, nothing recorded), " if report.dry_run
           else f"{c[JobStatus.DONE]} done, ")
        + (f"{c[JobStatus.WAITING]} waiting for time (not recorded: rerun later), " if c[JobStatus.WAITING] else "")
        + (f"{c[JobStatus.HELD]} held by another lease holder (not recorded), " if c[JobStatus.HELD] else "")
        + f"{c[JobStatus.SKIPPED]} skipped (finished earlier), {c[JobStatus.FAILED]} failed, "
        f"{c[JobStatus.NOT_RUN]} not run; {report.seconds:.1f}s; state {report.state_file}"
    )
    for t in failed:
        lines.append(f"FAILED {t.table}: {t.error}")
    if c[JobStatus.SKIPPED]:
        lines.append("(a rerun skips finished jobs; --restart runs them again)")
    return "\n".join(lines)
