"""``memwal status TABLE [--json]``."""

from __future__ import annotations

import argparse
import sys

from memwal.commands.common import EXIT_FAILED, EXIT_OK, emit, open_table_arg, table_command


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    return table_command(sub, "status", "per-shard merge, lag and index catch-up state")


def run(args: argparse.Namespace) -> int:
    from memwal.observe.metrics import record_lag
    from memwal.status import render_status, table_status

    st = table_status(open_table_arg(args), check_files=True)
    record_lag(st)
    emit(args, st.to_dict(), lambda: render_status(st))
    for s in st.broken:  # shown above too; a broken shard's state is unknown: that is a failure
        print(f"memwal: error: {s.problem}", file=sys.stderr)
    return EXIT_FAILED if st.broken else EXIT_OK
