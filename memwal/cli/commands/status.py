"""``memwal status TABLE [--json] [--html PATH]``."""

from __future__ import annotations

import argparse
import sys

from memwal.cli.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    Subparsers,
    check_output_file,
    emit,
    open_table_arg,
    table_command,
)


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = table_command(sub, "status", "per-shard merge, lag and index catch-up state")
    p.add_argument("--html", metavar="PATH", help="also write the status page to PATH: one self-contained HTML "
                   "file (lag per shard, index catch-up, lag over time, recent runs, checkpoints)")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.inspect.status import render_status, table_status

    if args.html:
        check_output_file("--html", args.html)  # a page that cannot be written is bad input, found before reading
    table = open_table_arg(args)
    st = table_status(table, check_files=True, manifest=table.opened)  # read once: opening read it
    st.record_metrics()
    if args.html:
        from memwal.inspect.page import collect, write_page

        write_page(args.html, collect(table, status=st))
    emit(args, st.to_dict(), lambda: render_status(st) + (f"\nstatus page: {args.html}" if args.html else ""))
    for s in st.broken:  # shown above too; a broken shard's state is unknown: that is a failure
        print(f"memwal: error: {s.problem}", file=sys.stderr)
    return EXIT_FAILED if st.broken else EXIT_OK

