"""``memwal policy TABLE [--set NAME=VALUE]... [--unset NAME]... [--json]``: the table's own maintenance policy.

Option values stored with the table (Lance's table config), used by every job, the cycle, the
follower and the fleet unless a run is given the option itself (:mod:`memwal.actions.policy`).
"""

from __future__ import annotations

import argparse
from typing import Any

from memwal.cli.commands.common import EXIT_OK, Subparsers, assignments, emit, open_table_arg, table_command


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = table_command(sub, "policy", "show or change the table's own maintenance policy (retention, grace, writer "
                                     "idle, history, merge bounds), used by every job unless given the option")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="store NAME=VALUE in the table's policy (repeatable): grace_seconds, expire_versions (or "
                        "never), writer_idle_seconds, history_retention, orphan_age_seconds, max_generations, "
                        "max_rows, max_bytes; values as the flags take them")
    p.add_argument("--unset", action="append", default=[], metavar="NAME",
                   help="remove NAME from the policy: memwal's default applies again (repeatable)")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.actions.policy import change_policy, table_policy

    table = open_table_arg(args)
    changing = bool(args.set or args.unset)
    before = table_policy(table)
    policy = change_policy(table, assignments(args.set, "NAME=VALUE"), list(args.unset)) if changing else before
    changed = policy.values != before.values
    doc: dict[str, Any] = {"table": table.uri, "changed": changed, "policy": policy.to_dict(),
                           "defaults": defaults()}
    emit(args, doc, lambda: render(doc))
    return EXIT_OK


def defaults() -> dict[str, Any]:
    """memwal's default of each option a policy may set (None: no bound, or never)."""
    from dataclasses import fields

    from memwal.actions.policy import POLICY_OPTIONS

    return {name: next(f.default for f in fields(cls) if f.name == name) for name, cls in POLICY_OPTIONS.items()}


def render(doc: dict[str, Any]) -> str:
    values, invalid = doc["policy"]["values"], doc["policy"]["invalid"]
    head = f"{doc['table']}: " + ("policy changed" if doc["changed"] else "policy")
    lines = [head]
    for name, default in doc["defaults"].items():
        if name in values:
            lines.append(f"  {name} = {values[name]}")
        else:
            shown = "none" if default is None else f"{default:.0f}" if isinstance(default, float) else default
            lines.append(f"  {name}: memwal's default ({shown})")
    lines += [f"  {name}: NOT USED: {why}" for name, why in invalid.items()]
    return "\n".join(lines)
