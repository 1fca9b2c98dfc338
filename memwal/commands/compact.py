"""``memwal compact TABLE [--target-rows-per-fragment N] [--max-rows-per-group N]
[--materialize-deletions-threshold F] [--max-fragments N] [--engine local|spark] [--dry-run] [--json]``."""

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
    p = table_command(sub, "compact", "rewrite small fragments and materialise deletions, keeping index catch-up")
    p.add_argument("--target-rows-per-fragment", type=positive_int, metavar="N",
                   help="rows per fragment after compaction (default: Lance's, 1048576)")
    p.add_argument("--max-rows-per-group", type=positive_int, metavar="N",
                   help="rows per row group in the rewritten files (default: Lance's, 1024)")
    p.add_argument("--materialize-deletions-threshold", type=fraction, metavar="F",
                   help="rewrite a fragment once more than F of its rows are deleted (default: Lance's, 0.1)")
    p.add_argument("--max-fragments", type=positive_int, metavar="N",
                   help="rewrite at most N fragments in this run (oldest first)")
    add_engine(p)
    add_lease_ttl(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.actions import run_action

    doc = run_action("compact", open_table_arg(args), engine=args.engine, dry_run=args.dry_run,
                     target_rows_per_fragment=args.target_rows_per_fragment,
                     max_rows_per_group=args.max_rows_per_group,
                     materialize_deletions_threshold=args.materialize_deletions_threshold,
                     max_fragments=args.max_fragments, lease_ttl=args.lease_ttl)
    emit(args, doc, lambda: render(doc))
    return EXIT_OK


def render(doc: dict) -> str:
    if doc.get("dry_run"):
        if not doc["tasks"]:
            return f"{doc['table']}: nothing to compact ({doc['fragments_before']} fragments; dry run)"
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
