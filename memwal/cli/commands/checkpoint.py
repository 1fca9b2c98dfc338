"""``memwal checkpoint (create TABLE --lifetime S [--name N] | list TABLE | refresh TABLE ID --lifetime S |
delete TABLE ID) [--json]``: reader checkpoints (memwal.checkpoint).

A long reader creates a checkpoint, reads it with ``memwal scan --checkpoint ID`` (or the
Python API) for as long as it needs, refreshes it before it expires, and deletes it. Bad
input (a lifetime that is not a positive finite number of seconds up to a year, an unknown
id, a table without a MemWAL) is exit 2 with nothing written.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from memwal.cli.commands.common import EXIT_OK, argparse_type, common_options, emit, open_table_arg

HELP = "pin the LSM view of now for long readers: create, list, refresh, delete"


def _lifetime(name: str, value: str) -> float:
    from memwal.checkpoint.record import lifetime

    return lifetime(value)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("checkpoint", help=HELP, description=HELP)
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    life = {"type": argparse_type(_lifetime), "required": True, "metavar": "SECONDS",
            "help": "how long the checkpoint pins its view (at most a year; refresh it before it runs out)"}
    create = verbs.add_parser("create", parents=[common_options()], help="pin the view of now")
    create.add_argument("table", metavar="TABLE", help="table URI")
    create.add_argument("--lifetime", **life)
    create.add_argument("--name", help="a name for people (shown by list)")
    ls = verbs.add_parser("list", parents=[common_options()], help="the table's checkpoints")
    ls.add_argument("table", metavar="TABLE", help="table URI")
    refresh = verbs.add_parser("refresh", parents=[common_options()], help="extend a live checkpoint")
    refresh.add_argument("table", metavar="TABLE", help="table URI")
    refresh.add_argument("id", metavar="ID", help="checkpoint id")
    refresh.add_argument("--lifetime", **life)
    delete = verbs.add_parser("delete", parents=[common_options()], help="release a checkpoint")
    delete.add_argument("table", metavar="TABLE", help="table URI")
    delete.add_argument("id", metavar="ID", help="checkpoint id")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal import checkpoint as ck
    from memwal.checkpoint.record import checkpoint_id

    if getattr(args, "id", None) is not None:
        checkpoint_id(args.id)  # a malformed id is bad input before the table is opened
    table = open_table_arg(args)
    if args.verb == "create":
        c = ck.create_checkpoint(table, lifetime_seconds=args.lifetime, name=args.name)
        doc = c.to_dict()
        emit(args, doc, lambda: f"{table.uri}: checkpoint {c.id} of version {c.version}, "
                                f"{_count(doc)} generations pinned until {_when(c.expires_at)}")
    elif args.verb == "list":
        from memwal.core import clock as clocks

        now = clocks.current()()
        records = ck.read_checkpoints(table, now)
        items = [{**c.to_dict(), "live": c.live(now)} for c in records.checkpoints]
        doc = {"table": table.uri, "checkpoints": items,
               "unreadable": [{"uri": u.uri, "reason": u.reason} for u in records.unreadable]}
        emit(args, doc, lambda: render(table.uri, items, doc["unreadable"]))
    elif args.verb == "refresh":
        c = ck.refresh_checkpoint(table, args.id, lifetime_seconds=args.lifetime)
        doc = c.to_dict()
        emit(args, doc, lambda: f"{table.uri}: checkpoint {c.id} pinned until {_when(c.expires_at)}")
    else:
        gone = ck.delete_checkpoint(table, args.id)
        if gone is None:  # a record that was no checkpoint, removed by its file's id
            doc = {"id": checkpoint_id(args.id), "deleted": True, "unreadable": True}
            emit(args, doc, lambda: f"{table.uri}: removed the unreadable checkpoint record {doc['id']}")
        else:
            doc = {**gone.to_dict(), "deleted": True}
            emit(args, doc, lambda: f"{table.uri}: deleted checkpoint {gone.id} (version {gone.version} is no longer "
                                    "pinned)")
    return EXIT_OK


def _count(doc: dict) -> int:
    return sum(len(g) for g in doc["shards"].values())


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds")


def render(uri: str, items: list[dict], unreadable: list[dict]) -> str:
    lines = [f"{uri}: {len(items)} checkpoint{'s' * (len(items) != 1)}" if items else f"{uri}: no checkpoints"]
    for c in items:
        state = "live" if c["live"] else "EXPIRED (gc removes it)"
        name = f" {c['name']!r}" if c["name"] else ""
        capped = f" (its record claimed {_when(c['claimed_expiry'])}: capped)" if c.get("claimed_expiry") else ""
        lines.append(f"  {c['id']}{name}: version {c['version']}, {_count(c)} generations, {state}, "
                     f"expires {_when(c['expires_at'])}{capped}")
    for u in unreadable:
        lines.append(f"  UNREADABLE {u['reason']} (memwal checkpoint delete removes it)")
    return "\n".join(lines)
