"""``memwal gc TABLE [--grace-seconds S] [--expire-versions S] [--orphans] [--engine ...] [--dry-run] [--json]``."""

from __future__ import annotations

import argparse
import sys

from memwal.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_engine,
    add_lease_ttl,
    emit,
    non_negative_float,
    open_table_arg,
    table_command,
)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = table_command(sub, "gc", "delete merged, indexed, unretained generations and their WAL entries")
    p.add_argument("--grace-seconds", type=non_negative_float, metavar="S",
                   help="reader grace period after the merge commit (default 600)")
    p.add_argument("--expire-versions", type=non_negative_float, metavar="S",
                   help="first expire base-table versions older than S seconds with Lance's cleanup (keeps tags)")
    p.add_argument("--orphans", action="store_true",
                   help="also remove unlisted generation directories and crashed-merge staging")
    p.add_argument("--orphan-age-seconds", type=non_negative_float, metavar="S",
                   help="orphans must be at least this old (default 3600)")
    p.add_argument("--audit-log", action="store_true",
                   help="also write the audit record under _mem_wal/_jobs/audit/ in the table's store")
    add_engine(p)
    add_lease_ttl(p)
    p.add_argument("--dry-run", action="store_true", help="show exactly what would go and what is blocked")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.actions import run_action

    doc = run_action("gc", open_table_arg(args), engine=args.engine, dry_run=args.dry_run,
                     grace_seconds=args.grace_seconds, expire_versions=args.expire_versions,
                     orphans=args.orphans, orphan_age_seconds=args.orphan_age_seconds, audit=args.audit_log,
                     lease_ttl=args.lease_ttl)
    emit(args, doc, lambda: render(doc))
    for b in doc.get("broken_shards", []):  # other shards were collected; this one was left whole
        print(f"memwal: error: {b['detail']} (nothing in it was collected)", file=sys.stderr)
    unsafe = [", ".join(b.get("reasons", [])[1:]) or f"shard {b['shard_id']} generation {b['generation']}"
              for b in doc["blocked"] if b["reason"] == "unsafe-path"]
    if unsafe:  # a link planted in the table (or a manifest path leaving its shard) needs an operator
        print(f"memwal: error: unsafe paths refused, nothing deleted through them: {'; '.join(unsafe)}",
              file=sys.stderr)
    return EXIT_FAILED if doc.get("broken_shards") or unsafe else EXIT_OK


def render(doc: dict) -> str:
    verb = "would delete" if doc["dry_run"] else "deleted"
    lines = [f"{doc['table']}: {verb} {len(doc['deleted'])} generations and {doc['wal_entries_deleted']} WAL entries"
             + ("" if doc["dry_run"] else f", {doc['bytes_freed']} bytes freed")]
    for d in doc["deleted"]:
        lines.append(f"  {verb} shard {d['shard_id']} generation {d['generation']} ({d['path']})")
    reasons: dict[str, int] = {}
    for b in doc["blocked"]:
        reasons[b["reason"]] = reasons.get(b["reason"], 0) + 1
    for reason, n in sorted(reasons.items()):
        lines.append(f"  blocked: {n} x {reason}")
    for o in doc["orphans"]:
        lines.append(f"  orphan {o['kind']} {o['key']} ({o['age_seconds']:.0f}s old)"
                     + ("" if doc.get("orphans_deleted") else ": kept (use --orphans)"))
    return "\n".join(lines)
