"""``memwal merge TABLE [--shard ID]... [--max-generations N] [--engine local|spark] [--dry-run] [--json]``."""

from __future__ import annotations

import argparse
import sys

from memwal.commands.common import EXIT_FAILED, EXIT_OK, add_engine, emit, open_table_arg, positive_int, table_command


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = table_command(sub, "merge", "merge flushed generations into the base table, in order, with atomic progress")
    p.add_argument("--shard", action="append", default=[], metavar="ID", help="only these shards (repeatable)")
    p.add_argument("--max-generations", type=positive_int, metavar="N", help="at most N generations per shard")
    p.add_argument("--max-rows", type=positive_int, metavar="N", help="stop adding generations past N change rows")
    p.add_argument("--max-bytes", type=positive_int, metavar="N", help="stop adding generations past N bytes")
    add_engine(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    return p


def merge_engine(name: str):
    """The engine by name; Spark is imported only when asked for (the core has no Spark)."""
    if name == "spark":
        from jobs.spark_engine import SparkMergeEngine

        return SparkMergeEngine.from_active_or_local()
    from memwal.merge.execute import LocalEngine

    return LocalEngine()


def run(args: argparse.Namespace) -> int:
    from memwal.lease import Lease
    from memwal.merge import plan_merge, run_merge

    table = open_table_arg(args)
    budget = dict(
        shards=args.shard or None,
        max_generations=args.max_generations,
        max_rows=args.max_rows,
        max_bytes=args.max_bytes,
    )
    # Plan before taking the lease: bad input (a corrupt manifest, an unknown shard) fails
    # here with nothing written, not even a lease object. The run re-plans under the lease.
    plan = plan_merge(table, **budget)
    if args.dry_run:
        doc = {"dry_run": True, **plan.to_json()}
        emit(args, doc, lambda: render_plan(doc))
        return EXIT_FAILED if plan.blocked else EXIT_OK
    engine = merge_engine(args.engine)
    with Lease(table.store, "merge") as lease:
        result = run_merge(table, engine=engine, lease=lease, **budget)
    doc = result.to_json()
    emit(args, doc, lambda: render_result(doc))
    for b in result.blocked:
        print(
            f"memwal: error: shard {b['shard_id']} stopped at generation {b['generation']}: {b['reason']}",
            file=sys.stderr,
        )
    return EXIT_FAILED if result.blocked else EXIT_OK


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
