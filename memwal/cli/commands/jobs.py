"""``memwal merge|catchup|compact|snapshot|gc TABLE [options]``: one command per action.

Every flag comes from the action's options dataclass (memwal.actions.options) and every run goes
through ``memwal.actions.run``, so the command line, the Python API, backfills, the
Spark jobs and the Airflow operators take the same options and give the same documents.
This module adds only what is the command line's own: the human rendering of each
document, and the exit code (1 when the action's ``problems`` are not empty).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from memwal.cli.commands.common import EXIT_FAILED, EXIT_OK, Subparsers, emit, open_table_arg, table_command
from memwal.cli.options import add_arguments, from_namespace
from memwal.core.words import counted


def add_parsers(sub: Subparsers) -> None:
    from memwal.actions import ACTIONS

    for name, act in ACTIONS.items():
        p = table_command(sub, name, act.help)
        add_arguments(p, act.options)
        p.set_defaults(run=partial(run, name))


def run(name: str, args: argparse.Namespace) -> int:
    from memwal import actions
    from memwal.cli.commands.progress import job_progress

    options = from_namespace(actions.ACTIONS[name].options, args)
    table = open_table_arg(args)
    with job_progress(name, args):  # bars on a terminal (merge, gc); nothing with --json
        result = actions.run(name, table, options)
    doc = result.to_dict()
    emit(args, doc, lambda: RENDER[name](doc))
    for problem in result.problems:
        print(f"memwal: error: {problem}", file=sys.stderr)
    return EXIT_FAILED if result.problems else EXIT_OK


def _merge_plan(doc: dict[str, Any]) -> str:
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


def _merge_result(doc: dict[str, Any]) -> str:
    if doc["version"] is None:
        return f"{doc['table']}: nothing to merge"
    lines = [
        f"{doc['table']}: merged into version {doc['version']} in {counted(doc['commits'], 'commit')}, "
        f"engine {doc['engine']}"
    ]
    for s in doc["shards"]:
        lines.append(
            f"  shard {s['shard_id']}: generations {s['from_generation']}..{s['to_generation']}, "
            f"{s['rows_upserted']} rows upserted, {s['rows_deleted']} deleted"
        )
    return "\n".join(lines)


def _catchup(doc: dict[str, Any]) -> str:
    from memwal.catchup.plan import WAIT  # here: the CLI's start loads no engine (tests/integration/test_start_up.py)

    head = "catch-up plan (dry run: nothing written)" if doc.get("dry_run") else f"catch-up: version {doc['version']}"
    lines = [f"{doc['table']}: {head}"]
    for i in doc["indexes"]:
        if doc.get("dry_run"):
            lag = max(i["lag"].values(), default=0)
            lines.append(f"  {i['index_name']}: {i['action']} ({i['reason']}; lag {lag} generations, "
                         f"{i['unindexed_rows']} unindexed rows, {i['num_deltas']} deltas)")
        elif i["action"] == WAIT:
            lines.append(f"  {i['index_name']}: waits for rows enough to train it (see the dry run); nothing to record")
        else:
            state = "recorded" if i["recorded"] else "NOT recorded"
            lines.append(f"  {i['index_name']}: {i['action']}, catch-up {state}: {i['caught_up']}")
    return "\n".join(lines)


def _compact(doc: dict[str, Any]) -> str:
    if doc.get("dry_run"):
        if not doc["tasks"]:
            repair = (f"; would re-earn the catch-up of {', '.join(doc['catchup_repair'])}, which an earlier "
                      "compaction dropped" if doc.get("catchup_repair") else "")
            return f"{doc['table']}: nothing to compact ({doc['fragments_before']} fragments{repair}; dry run)"
        return (f"{doc['table']}: would rewrite {doc['fragments_to_rewrite']} of {doc['fragments_before']} fragments "
                f"in {len(doc['tasks'])} tasks, materialising {doc['deletions_to_materialize']} deleted rows "
                "(dry run: nothing written)")
    caught = sum(1 for i in doc["indexes"] if i["recorded"])
    indexes = f"{caught}/{len(doc['indexes'])} maintained indexes caught up"
    if doc["version"] is None:
        return f"{doc['table']}: nothing to compact ({doc['fragments_before']} fragments; {indexes})"
    if not doc["fragments_removed"]:
        return f"{doc['table']}: re-earned index catch-up in version {doc['version']} ({indexes})"
    return (f"{doc['table']}: compacted {doc['fragments_before']} -> {doc['fragments_after']} fragments in version "
            f"{doc['version']} ({doc['deletions_materialized']} deleted rows materialised; {indexes}; "
            f"engine {doc['engine']})")


def _snapshot_plan(doc: dict[str, Any]) -> str:
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


def _snapshot_result(doc: dict[str, Any]) -> str:
    if doc["version"] is None:
        return f"{doc['table']}: nothing committed: {doc.get('reason') or 'the published snapshot is current'}"
    where = "inline" if doc["storage"] == "inline" else doc["path"]
    line = (
        f"{doc['table']}: snapshot of {doc['num_shards']} shards committed at version {doc['version']} "
        f"({where}, {doc['bytes']} bytes, snapshot_ts_millis {doc['snapshot_ts_millis']})"
    )
    if doc["repairs"]:
        line += (
            f"; {counted(doc['interleaved_commits'], 'concurrent commit')} interleaved, progress they recorded was "
            f"restored in {counted(doc['repairs'], 'repair commit')} (hazard H1)"
        )
    return line


def _merge(doc: dict[str, Any]) -> str:
    return _merge_plan(doc) if doc.get("dry_run") else _merge_result(doc)


def _gc(doc: dict[str, Any]) -> str:
    from memwal.gc import render_gc

    return render_gc(doc)


def _snapshot(doc: dict[str, Any]) -> str:
    return _snapshot_plan(doc) if doc.get("dry_run") else _snapshot_result(doc)


#: Human rendering of each action's document (plan or result).
RENDER: dict[str, Callable[[dict[str, Any]], str]] = {
    "merge": _merge, "catchup": _catchup, "compact": _compact, "snapshot": _snapshot, "gc": _gc,
}
