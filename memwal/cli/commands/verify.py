"""``memwal verify TABLE [--json]``: exit 0 when every invariant holds, 1 otherwise."""

from __future__ import annotations

import argparse

from memwal.cli.commands.common import EXIT_FAILED, EXIT_OK, emit, open_table_arg, table_command


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    return table_command(sub, "verify", "check the table's MemWAL invariants (changes nothing)")


def run(args: argparse.Namespace) -> int:
    from memwal.inspect.verify import verify_table

    res = verify_table(open_table_arg(args))

    def human() -> str:
        lines = [
            f"{res.table} version {res.version}: {'OK' if res.ok else 'PROBLEMS FOUND'} "
            f"({len(res.checks)} checks, {res.base_rows} base rows, {res.lsm_rows} rows in the LSM view)"
        ]
        lines += [f"  {p.check}: {p.shard_id or '-'}: {p.detail}" for p in res.problems]
        lines += [f"  warning: {p.check}: {p.detail}" for p in res.warnings]
        return "\n".join(lines)

    emit(args, res.to_dict(), human)
    return EXIT_OK if res.ok else EXIT_FAILED
