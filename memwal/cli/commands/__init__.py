"""The CLI's commands, in the order ``memwal --help`` lists them.

Each module has ``add_parser(subparsers)`` and ``run(args) -> int``, except ``jobs``,
which registers one command per action (``add_parsers``): merge, catchup, compact,
snapshot, gc.
"""

COMMAND_MODULES = [
    "status",
    "jobs",
    "scan",
    "checkpoint",
    "verify",
    "repair",
    "lease",
    "writers",
    "history",
    "merge_ops",
    "policy",
    "cycle",
    "backfill",
    "fleet",
    "demo_data",
]
