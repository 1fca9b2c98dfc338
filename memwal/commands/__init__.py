"""One module per CLI command, each with ``add_parser(subparsers)`` and ``run(args) -> int``."""

COMMAND_MODULES = [
    "status",
    "merge",
    "catchup",
    "compact",
    "gc",
    "snapshot",
    "scan",
    "verify",
    "lease",
    "merge_ops",
    "backfill",
    "demo_data",
]
