"""``memwal status TABLE [--json] [--html PATH]``."""

from __future__ import annotations

import argparse
import sys

from memwal.cli.commands.common import EXIT_FAILED, EXIT_OK, emit, open_table_arg, table_command


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = table_command(sub, "status", "per-shard merge, lag and index catch-up state")
    p.add_argument("--html", metavar="PATH", help="also write the status page to PATH: one self-contained HTML "
                   "file (lag per shard, index catch-up, lag over time, recent runs, checkpoints)")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.inspect.status import render_status, table_status

    if args.html:
        check_page_path(args.html)  # a page that cannot be written is bad input, found before reading
    table = open_table_arg(args)
    st = table_status(table, check_files=True)
    st.record_metrics()
    if args.html:
        from memwal.inspect.page import collect, write_page

        write_page(args.html, collect(table, status=st))
    emit(args, st.to_dict(), lambda: render_status(st) + (f"\nstatus page: {args.html}" if args.html else ""))
    for s in st.broken:  # shown above too; a broken shard's state is unknown: that is a failure
        print(f"memwal: error: {s.problem}", file=sys.stderr)
    return EXIT_FAILED if st.broken else EXIT_OK


def check_page_path(path: str) -> None:
    """Refuse an ``--html`` destination that cannot be written (exit 2, nothing read or written)."""
    import os

    from memwal.errors import BadInputError

    full = os.path.abspath(path)
    folder = os.path.dirname(full)
    if os.path.isdir(full):
        raise BadInputError(f"--html {path}: is a folder")
    if not os.path.isdir(folder):
        raise BadInputError(f"--html {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(full) and not os.access(full, os.W_OK)):
        raise BadInputError(f"--html {path}: not writable")
