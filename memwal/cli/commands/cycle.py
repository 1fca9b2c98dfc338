"""``memwal cycle TABLE [--jobs LIST] [--engine local|spark] [--dry-run] [job options] [--json]``.

The whole maintenance cycle of one table (merge, catchup, compact, gc, snapshot, in that
order), through :func:`memwal.cycle.run_cycle`: ``spark-submit jobs/maintenance.py`` is this
command on the Spark engine, one application for all five jobs. With ``--follow`` it keeps
running (:mod:`memwal.follow`): a merge as soon as a shard has work, the other jobs on cadences
of their own, until SIGTERM or SIGINT (exit 0). Every job's options are the
flags of its own command. The cycle stops at the first job that fails; a job whose lease
another holder has is ``held`` (reported, not a failure). Exit code: 0, or the failed job's; 3
when an operator cancelled it (``memwal fleet cancel``: the job stopped, the later ones not run).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Any

from memwal.cli.commands.backfill import add_job_arguments, job_options_from, job_order
from memwal.cli.commands.common import EXIT_LEASE, EXIT_OK, Subparsers, emit, open_table_arg, table_command
from memwal.cli.commands.following import add_follow_arguments, ended, follow_options_from, quiet_jobs
from memwal.core.text import one_line

if TYPE_CHECKING:  # the runner (memwal.cycle) loads when the command runs, not for --help
    from memwal.cycle import CycleResult, JobOutcome
    from memwal.follow import FollowOptions

log = logging.getLogger("memwal.cycle")


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = table_command(sub, "cycle", "the whole maintenance cycle of one table: merge, catchup, compact, gc, snapshot")
    p.add_argument("--jobs", default=",".join(job_order()), metavar="LIST",
                   help=f"comma-separated jobs, run in the order {', '.join(job_order())} (default: all)")
    p.add_argument("--dry-run", action="store_true", help="every job's dry run; nothing written")
    add_job_arguments(p)
    add_follow_arguments(p)
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.backfill import validated_options
    from memwal.cycle import parse_jobs, run_cycle

    jobs = parse_jobs(args.jobs)
    follow = follow_options_from(args)
    options = validated_options(jobs, job_options_from(args), engine=args.engine or "local", dry_run=args.dry_run)
    if follow is not None:
        return _follow(args, jobs, options, follow)
    result = run_cycle(open_table_arg(args), jobs, options, notify=_log)
    emit(args, result.to_dict(), lambda: render(result))
    failed = result.failed
    if failed is not None:
        print(f"memwal: error: {failed.job}: {one_line(failed.error or '')}", file=sys.stderr)
        return failed.exit_code or 1
    cancelled = result.cancelled
    if cancelled is not None:  # an operator stopped it: exit 3, as the job's own command
        print(f"memwal: error: {one_line(cancelled.summary)}", file=sys.stderr)
        return EXIT_LEASE
    return EXIT_OK


def _follow(args: argparse.Namespace, jobs: list[str], options: dict[str, Any], follow: FollowOptions) -> int:
    from memwal.follow import StopSignals, follow_table
    from memwal.follow.table import logged

    table = open_table_arg(args)
    quiet_jobs(args.debug)
    with StopSignals() as stop:
        tally = follow_table(table, jobs, options, follow, stop=stop, notify=logged)
    emit(args, tally.to_dict(), tally.line)
    return ended(tally)


def _log(event: str, outcome: JobOutcome) -> None:
    from memwal.cycle import JobStatus

    if event == "end" and outcome.status is not JobStatus.FAILED:
        log.info("%s %s: %s (%s)", outcome.table, outcome.job, outcome.status, outcome.summary or outcome.error)


def render(result: CycleResult) -> str:
    """One line a job: job, status and time in columns (as wide as the widest status: a
    ``cancelled`` row keeps the others aligned), then what it did or why not."""
    from memwal.cycle import JobStatus

    lines = [f"{result.table}: maintenance cycle"]
    width = max((len(str(j.status)) for j in result.jobs), default=0)
    for j in result.jobs:
        took = "" if j.status in (JobStatus.NOT_RUN, JobStatus.SKIPPED) else f"{j.seconds:.1f}s"
        lines.append(f"  {j.job:<8} {str(j.status):<{width}} {took:>7}  {j.summary or j.error or ''}".rstrip())
    return "\n".join(lines)
