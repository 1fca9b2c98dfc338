"""One module per CLI command, each with ``add_parser(subparsers)`` and ``run(args) -> int``."""

COMMAND_MODULES = [
    "status",
    "merge",
    "catchup",
    "gc",
    "snapshot",
    "scan",
    "verify",
    "backfill",
    "demo_data",
]
