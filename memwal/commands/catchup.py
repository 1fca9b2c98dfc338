"""``memwal catchup TABLE [--index NAME]... [--engine local|spark] [--dry-run] [--json]``."""

from __future__ import annotations

import argparse

from memwal.commands.common import (
    EXIT_OK,
    add_engine,
    add_lease_ttl,
    emit,
    fraction,
    open_table_arg,
    positive_int,
    table_command,
)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = table_command(sub, "catchup", "bring base-table indexes up to the merged generations")
    p.add_argument("--index", action="append", default=[], metavar="NAME",
                   help="only these indexes (default: the MemWAL index's maintained indexes)")
    p.add_argument("--max-deltas", type=positive_int, metavar="N",
                   help="retrain an index that has N or more deltas (default 8)")
    p.add_argument("--max-unindexed-fraction", type=fraction, metavar="F",
                   help="retrain when more than F of the rows are unindexed (default 0.5)")
    add_engine(p)
    add_lease_ttl(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.actions import run_action

    doc = run_action("catchup", open_table_arg(args), engine=args.engine, dry_run=args.dry_run,
                     indexes=args.index or None, max_deltas=args.max_deltas,
                     max_unindexed_fraction=args.max_unindexed_fraction, lease_ttl=args.lease_ttl)
    emit(args, doc, lambda: render(doc))
    return EXIT_OK


def render(doc: dict) -> str:
    head = "catch-up plan (dry run: nothing written)" if doc.get("dry_run") else f"catch-up: version {doc['version']}"
    lines = [f"{doc['table']}: {head}"]
    for i in doc["indexes"]:
        if doc.get("dry_run"):
            lag = max(i["lag"].values(), default=0)
            lines.append(f"  {i['index_name']}: {i['action']} ({i['reason']}; lag {lag} generations, "
                         f"{i['unindexed_rows']} unindexed rows, {i['num_deltas']} deltas)")
        else:
            state = "recorded" if i["recorded"] else "NOT recorded"
            lines.append(f"  {i['index_name']}: {i['action']}, catch-up {state}: {i['caught_up']}")
    return "\n".join(lines)
