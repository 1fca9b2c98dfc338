"""``memwal writers TABLE [--closed SHARD ...] [--yes] [--json]``: each shard's writer, and saying one was closed.

Lists every shard's writer as GC judges it: its epoch, its last write, live or quiet, and whether
it was said closed. A writer that was closed looks like a quiet one on storage, so GC keeps what
its view needs for the writer idle period (a day by default). ``--closed SHARD --yes`` records
that the shard's writer, as it is now, was closed: GC then drains what it kept once its other
gates pass. A write after it, or a new writer, makes the record void by itself. Without ``--yes``
the command refuses (exit 2) and says what it would record: a live writer said closed has its
next read fail on a folder GC removed.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from memwal.cli.commands.common import EXIT_OK, Subparsers, emit, open_table_arg, table_command
from memwal.errors import BadInputError

if TYPE_CHECKING:
    from memwal.table.writer import WriterView
    from memwal.table.writers_closed import ClosedWriter


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = table_command(sub, "writers", "list each shard's writer as gc judges it, or say that one was closed")
    p.add_argument("--closed", action="append", metavar="SHARD", default=[],
                   help="record that this shard's writer was closed (repeatable), so that gc stops waiting "
                        "for it; void once it writes again")
    p.add_argument("--yes", action="store_true", help="really record it (without: only say what would be recorded)")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.inspect.writers import closing, say_closed, writer_views

    table = open_table_arg(args)
    if not args.closed:
        if args.yes:
            raise BadInputError("--yes only goes with --closed SHARD")
        views = writer_views(table)
        doc: dict[str, Any] = {"table": table.uri, "writers": [v.to_dict() for v in views.values()]}
        emit(args, doc, lambda: render(table.uri, list(views.values())))
        return EXIT_OK
    records = closing(table, args.closed)
    if not args.yes:
        raise BadInputError(f"would record {_said(records)}: rerun with --yes to record it (a writer still open "
                            "then fails its next read of what gc drains)")
    say_closed(table, records)
    doc = {"table": table.uri, "closed": [r.to_dict() for r in records]}
    emit(args, doc, lambda: f"{table.uri}: recorded {_said(records)}; gc drains what it kept for them once its "
                            "other gates pass (void for a writer that writes again)")
    return EXIT_OK


def _said(records: list[ClosedWriter]) -> str:
    from memwal.core.clock import current
    from memwal.core.sizes import human_duration

    now = current()()
    return "; ".join(f"shard {r.shard_id}'s writer (epoch {r.epoch}, last write "
                     f"{human_duration(max(0.0, now - r.last_write))} ago) closed" for r in records)


def render(uri: str, views: list[WriterView]) -> str:
    from memwal.core.clock import current
    from memwal.core.sizes import human_duration

    now = current()()
    if not views:
        return f"{uri}: no shards"
    lines = [f"{uri}: {len(views)} shard writers (as gc judges them, with its default writer idle period)"]
    for v in views:
        last = "never wrote" if v.last_activity is None else f"last write {human_duration(now - v.last_activity)} ago"
        if v.closed is not None:
            state = f"closed (said by {v.closed.by} {human_duration(now - v.closed.recorded_at)} ago)"
        elif v.live:
            state = "live"
        else:
            state = "quiet"
        lines.append(f"  shard {v.shard_id}: epoch {v.epoch}, {state}, {last}")
    return "\n".join(lines)
