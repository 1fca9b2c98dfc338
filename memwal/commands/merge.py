"""``memwal merge TABLE [--shard ID]... [--max-generations N] [--engine local|spark] [--dry-run] [--json]``."""

from __future__ import annotations

import argparse
import sys

from memwal.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_engine,
    add_lease_ttl,
    emit,
    open_table_arg,
    positive_int,
    table_command,
)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = table_command(sub, "merge", "merge flushed generations into the base table, in order, with atomic progress")
    p.add_argument("--shard", action="append", default=[], metavar="ID", help="only these shards (repeatable)")
    p.add_argument("--max-generations", type=positive_int, metavar="N", help="at most N generations per shard")
    p.add_argument("--max-rows", type=positive_int, metavar="N", help="stop adding generations past N change rows")
    p.add_argument("--max-bytes", type=positive_int, metavar="N", help="stop adding generations past N bytes")
    add_engine(p)
    add_lease_ttl(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.actions import run_action

    doc = run_action(
        "merge",
        open_table_arg(args),
        engine=args.engine,
        dry_run=args.dry_run,
        shards=args.shard,
        max_generations=args.max_generations,
        max_rows=args.max_rows,
        max_bytes=args.max_bytes,
        lease_ttl=args.lease_ttl,
    )
    emit(args, doc, lambda: render_plan(doc) if args.dry_run else render_result(doc))
    for b in doc["blocked"]:
        print(
            f"memwal: error: shard {b['shard_id']} stopped at generation {b['generation']}: {b['reason']}",
            file=sys.stderr,
        )
    return EXIT_FAILED if doc["blocked"] else EXIT_OK


def render_plan(doc: dict) -> str:
    lines = [f"merge plan for {doc['table']} at version {doc['read_version']} (dry run: nothing written)"]
    for s in doc["shards"]:
        rows = sum(g["rows"] for g in s["generations"])
        lines.append(
            f"  shard {s['shard_id']}: generations {s['from_generation']}..{s['to_generation']} "
            f"({len(s['generations'])} generations, {rows} rows)"
        )
    for b in doc["blocked"]:
        lines.append(f"  BLOCKED shard {b['shard_id']} at generation {b['generation']}: {b['reason']}")
    if not doc["shards"] and not doc["blocked"]:
        lines.append("  nothing to merge")
    return "\n".join(lines)


def render_result(doc: dict) -> str:
    if doc["version"] is None:
        return f"{doc['table']}: nothing to merge"
    lines = [
        f"{doc['table']}: merged into version {doc['version']} in {doc['commits']} commit(s), engine {doc['engine']}"
    ]
    for s in doc["shards"]:
        lines.append(
            f"  shard {s['shard_id']}: generations {s['from_generation']}..{s['to_generation']}, "
            f"{s['rows_upserted']} rows upserted, {s['rows_deleted']} deleted"
        )
    return "\n".join(lines)
