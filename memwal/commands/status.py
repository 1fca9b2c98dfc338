"""``memwal status TABLE [--json]``."""

from __future__ import annotations

import argparse

from memwal.commands.common import EXIT_OK, emit, open_table_arg, table_command


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    return table_command(sub, "status", "per-shard merge, lag and index catch-up state")


def run(args: argparse.Namespace) -> int:
    from memwal.status import render_status, table_status

    st = table_status(open_table_arg(args))
    emit(args, st.to_json(), lambda: render_status(st))
    return EXIT_OK
