"""``memwal lease TABLE [--break KIND] [--yes] [--json]``: see and clear job leases.

Lists every lease on the table (kind, holder with its host, pid and run id, token, last
renewal by the holder's heartbeat, expiry, and whether it is live, expired, released, held
by a dead local process, or corrupt). ``--break KIND`` clears a
stuck one, but only with ``--yes``: without it the command refuses (exit 2) and says
exactly what it would break, because breaking a live holder's lease lets a second job
of that kind start while the first still runs (the first stops at its next lease check).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from memwal.cli.commands.common import EXIT_OK, Subparsers, emit, open_table_arg, table_command
from memwal.errors import BadInputError

if TYPE_CHECKING:  # the leases (and the store under them) load when the command runs, not for --help
    from memwal.lease import LeaseInfo

#: The kinds of lease memwal's jobs take (merge-ops and snapshot also take the merge lease; a
#: follower, ``memwal cycle --follow``, holds ``follow`` while it runs).
JOB_KINDS = ("merge", "catchup", "compact", "snapshot", "gc", "follow")


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = table_command(sub, "lease", "list the table's job leases, or break a stuck one")
    p.add_argument("--break", dest="break_kind", metavar="KIND", help="clear the lease of this job kind")
    p.add_argument("--yes", action="store_true", help="really break it (without: only say what would be broken)")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.lease import EXPIRED, RELEASED, break_lease, describe_lease, lease_key, list_leases

    table = open_table_arg(args)
    if args.break_kind is None:
        if args.yes:
            raise BadInputError("--yes only goes with --break KIND")
        infos = list_leases(table.store)
        doc: dict[str, Any] = {"table": table.uri, "leases": [i.to_dict() for i in infos]}
        emit(args, doc, lambda: render(table.uri, infos))
        return EXIT_OK
    kind = args.break_kind
    kinds = [i.kind for i in list_leases(table.store)]
    if kind not in kinds:
        lease_key(kind)  # a malformed kind is refused as such
        listed = ", ".join(kinds) if kinds else "none"
        raise BadInputError(f"no {kind} lease on {table.uri}: nothing to break (its leases: {listed}; the job "
                            f"kinds are {', '.join(JOB_KINDS)})")
    info = describe_lease(table.store, kind)
    if info is None:
        raise BadInputError(f"no {kind} lease on {table.uri}: nothing to break")
    if info.state in (EXPIRED, RELEASED):
        doc = {"table": table.uri, "broken": None, "lease": info.to_dict()}
        emit(args, doc, lambda: f"{table.uri}: the {kind} lease is already {info.state}: nothing to break")
        return EXIT_OK
    if not args.yes:
        raise BadInputError(f"would break {_what(info)}: rerun with --yes to break it")
    rec = break_lease(table.store, kind)
    doc = {"table": table.uri, "broken": {**info.to_dict(), "token": rec.token}}
    emit(args, doc, lambda: f"{table.uri}: broke {_what(info)}; the next {kind} job takes token {rec.token + 1}")
    return EXIT_OK


def _what(info: LeaseInfo) -> str:
    """One phrase naming a lease and its state, for the refusal and the confirmation."""
    from memwal.lease import CORRUPT

    if info.state == CORRUPT:
        return f"the corrupt {info.kind} lease {info.uri}"
    return (
        f"the {info.state} {info.kind} lease {info.uri} of {info.holder} (token {info.token}, expires {info.expires})"
    )


def render(uri: str, infos: list[LeaseInfo]) -> str:
    from memwal.lease import CORRUPT

    if not infos:
        return f"{uri}: no leases"
    lines = [f"{uri}: {len(infos)} leases"]
    for i in infos:
        if i.state == CORRUPT:
            lines.append(f"  {i.kind}: CORRUPT: {i.problem}")
        else:
            run = f", run {i.run_id}" if i.run_id else ""
            lines.append(f"  {i.kind}: {i.state}, holder {i.holder} (host {i.host}, pid {i.pid}{run}), "
                         f"token {i.token}, last renewed {i.renewed or '-'}, expires {i.expires or '-'}")
    return "\n".join(lines)
