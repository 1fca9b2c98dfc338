"""``memwal repair TABLE [--shard S] [--dry-run | --apply | --accept] [--confirm ID] [--json]``.

GC leaves a merged generation whose rows the base does not hold (``progress-unproven``) listed
and on storage. This command shows it key by key (the dry run, the default: each key's value in
the generation, in the base, and the commit that made the base's), then does what the operator
confirms by the plan's id: ``--apply`` writes the generations' rows into the base, ``--accept``
takes the base as the truth for them. Either is recorded, and the next GC drains them.
"""

from __future__ import annotations

import argparse
import getpass
from typing import Any

from memwal.cli.commands.common import EXIT_OK, Subparsers, emit, open_table_arg, table_command
from memwal.core.text import clip, one_line


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = table_command(sub, "repair", "show, then re-apply or accept, merged generations whose rows the base "
                                     "table does not hold (GC keeps them: progress-unproven)")
    p.add_argument("--shard", metavar="SHARD", help="only this shard")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--dry-run", action="store_true", help="show the plan and its id (the default: writes nothing)")
    how.add_argument("--apply", action="store_true", help="write the generations' rows into the base table")
    how.add_argument("--accept", action="store_true",
                     help="take the base table as the truth for those generations (writes no row)")
    p.add_argument("--confirm", metavar="ID", help="the plan id the dry run printed (required by --apply and --accept)")
    p.add_argument("--by", metavar="NAME", help="who accepts (recorded; default: the login name)")
    p.add_argument("--lease-ttl", type=float, default=300.0, help="the merge lease's time to live, in seconds")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.errors import BadInputError
    from memwal.lease import Lease
    from memwal.repair import ACCEPTED, APPLY, plan_repair, run_repair

    table = open_table_arg(args)
    if not (args.apply or args.accept):
        plan = plan_repair(table, shard=args.shard)
        doc = {"dry_run": True, **plan.to_dict()}
        emit(args, doc, lambda: render_plan(doc))
        return EXIT_OK
    if not args.confirm:
        raise BadInputError("--apply and --accept need --confirm ID: the plan id memwal repair --dry-run printed")
    with Lease(table.store, "merge", ttl_seconds=args.lease_ttl) as lease:
        lease.check()
        result = run_repair(table, APPLY if args.apply else ACCEPTED, args.confirm, shard=args.shard,
                            by=args.by or _login())
        lease.check()
    doc = result.to_dict()
    emit(args, doc, lambda: render_result(doc))
    return EXIT_OK


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _value(v: Any) -> str:
    return "(absent)" if v is None else clip(one_line(str(v)), 160)


def render_plan(doc: dict[str, Any]) -> str:
    if not doc["shards"]:
        return f"{doc['table']}: nothing to repair (every merged generation on storage is proven)"
    lines = [f"{doc['table']} version {doc['read_version']}: repair plan {doc['plan_id']}"]
    for s in doc["shards"]:
        gens = ", ".join(str(g["generation"]) for g in s["generations"])
        lines.append(f"  shard {s['shard_id']}: generations {gens}: {s['keys']} keys")
        lines.append(f"    why: {one_line(s['why'])}")
        for k in s["shown"]:
            by = f" (since version {k['changed_by']})" if k["changed_by"] is not None else ""
            lines.append(f"    key {_value(k['key'])} (generation {k['generation']}): "
                         f"generation {_value(k['generation_value'])}; base {_value(k['base_value'])}{by}")
    lines.append(f"  then: memwal repair {doc['table']} --apply --confirm {doc['plan_id']}   (writes the rows)")
    lines.append(f"    or: memwal repair {doc['table']} --accept --confirm {doc['plan_id']}  (the base stands)")
    return "\n".join(lines)


def render_result(doc: dict[str, Any]) -> str:
    done = "written" if doc["how"] == "apply" else "accepted"
    lines = [f"{doc['table']}: repair plan {doc['plan_id']} {done}"
             + (f" (versions {', '.join(map(str, doc['versions']))})" if doc["versions"] else "")]
    lines += [f"  shard {s['shard_id']}: generations {', '.join(map(str, s['generations']))}: {s['keys']} keys"
              for s in doc["shards"]]
    return "\n".join(lines)
