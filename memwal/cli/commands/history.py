"""``memwal history TABLE [--limit N] [--job J] [--since T] [--json]``: what ran, and what it did.

Every run of every job on the table, newest first, whatever started it (the CLI, spark-submit,
Airflow, the Python API), with its outcome, the versions it committed and the job's figures;
versions committed by anyone else in between are listed as ``external``.
"""

from __future__ import annotations

import argparse

from memwal.cli.commands.common import EXIT_OK, Subparsers, emit, open_table_arg, positive_int, table_command


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = table_command(sub, "history", "every job run on the table, newest first, with what it did")
    p.add_argument("--limit", type=positive_int, default=20, metavar="N", help="at most N runs (default 20)")
    p.add_argument("--job", choices=["merge", "catchup", "compact", "snapshot", "gc"], help="only this job's runs")
    p.add_argument("--since", metavar="T",
                   help="runs started at or after T: an ISO date/time, epoch seconds, or a duration back (24h, 7d)")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.history.timeline import history, parse_since, render

    since = parse_since(args.since)  # bad input before the table is opened
    h = history(open_table_arg(args), limit=args.limit, job=args.job, since=since)
    emit(args, h.to_dict(), lambda: render(h))
    return EXIT_OK
