"""``memwal snapshot TABLE [--engine local|spark] [--dry-run] [--json]``."""

from __future__ import annotations

import argparse

from memwal.commands.common import EXIT_OK, add_engine, add_lease_ttl, emit, open_table_arg, table_command


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = table_command(sub, "snapshot", "publish every shard's state in the MemWAL index (the shard snapshot)")
    add_engine(p)
    add_lease_ttl(p)
    p.add_argument("--dry-run", action="store_true", help="print what the snapshot would hold, change nothing")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.actions import run_action

    doc = run_action(
        "snapshot", open_table_arg(args), engine=args.engine, dry_run=args.dry_run, lease_ttl=args.lease_ttl
    )
    emit(args, doc, lambda: render_plan(doc) if args.dry_run else render_result(doc))
    return EXIT_OK


def render_plan(doc: dict) -> str:
    lines = [
        f"snapshot plan for {doc['table']} at version {doc['read_version']} (dry run: nothing written): "
        f"{doc['num_shards']} shards, stored {doc['storage']} (threshold {doc['inline_threshold']}), "
        f"read in {doc['read_seconds']}s by the {doc['engine']} engine"
    ]
    for s in doc["shards"]:
        gens = s["flushed_generations"]
        lines.append(
            f"  shard {s['shard_id']}: manifest version {s['version']}, current generation "
            f"{s['current_generation']}, {len(gens)} flushed generations"
        )
    for p in doc["problems"]:
        lines.append(f"  PROBLEM shard {p['shard_id']} generation {p['generation']}: {p['reason']}")
    return "\n".join(lines)


def render_result(doc: dict) -> str:
    where = "inline" if doc["storage"] == "inline" else doc["path"]
    line = (
        f"{doc['table']}: snapshot of {doc['num_shards']} shards committed at version {doc['version']} "
        f"({where}, {doc['bytes']} bytes, snapshot_ts_millis {doc['snapshot_ts_millis']})"
    )
    if doc["repairs"]:
        line += (
            f"; {doc['interleaved_commits']} concurrent commits interleaved, progress they recorded was "
            f"restored in {doc['repairs']} repair commit(s) (hazard H1)"
        )
    return line
