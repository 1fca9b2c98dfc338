"""``memwal merge-ops TABLE [--set COL=OP]... [--unset COL]... [--force] [--json]``."""

from __future__ import annotations

import argparse
from typing import Any

from memwal.cli.commands.common import EXIT_OK, Subparsers, assignments, emit, open_table_arg, table_command


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = table_command(sub, "merge-ops", "show or change the columns' merge operators (sum, max, partial update, ...)")
    p.add_argument("--set", action="append", default=[], metavar="COL=OP",
                   help="give COL the operator OP: replace, sum, min, max, last_non_null, first_non_null, "
                        "bool_or, bool_and (repeatable)")
    p.add_argument("--unset", action="append", default=[], metavar="COL", help="COL goes back to replace (repeatable)")
    p.add_argument("--force", action="store_true",
                   help="change operators although unmerged generations exist (their meaning changes)")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.actions.merge_ops import change_merge_ops

    result = change_merge_ops(open_table_arg(args), set_ops=assignments(args.set, "COLUMN=OPERATOR"),
                              unset=args.unset, force=args.force, lease_ttl=getattr(args, "lease_ttl", None) or 300.0)
    doc = result.to_dict()
    emit(args, doc, lambda: render(doc))
    return EXIT_OK


def render(doc: dict[str, Any]) -> str:
    ops = doc["merge_ops"]
    head = (f"{doc['table']}: committed version {doc['version']}" if doc["version"] is not None
            else f"{doc['table']}: no change")
    body = [f"  {c}: {op}" for c, op in ops.items()] or ["  every column: replace (last write wins)"]
    return "\n".join([head, *body])
