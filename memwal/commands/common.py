"""What every command shares: common options, output, exit codes, opening the table."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from memwal.errors import BadInputError
from memwal.table import Table, open_table

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_LEASE = 0, 1, 2, 3


class Parser(argparse.ArgumentParser):
    """argparse already exits 2 on bad usage; we make the message one clear line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"memwal: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def parse_storage_options(pairs: Sequence[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInputError(f"--storage-option {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def common_options(*, json_flag: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--storage-option",
        action="append",
        metavar="KEY=VALUE",
        default=[],
        help="Lance storage option (repeatable), e.g. aws_endpoint=http://127.0.0.1:9000",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    if json_flag:
        p.add_argument("--json", action="store_true", help="print the result as one JSON document on stdout")
        p.add_argument(
            "--result-file",
            metavar="PATH",
            help="also write the JSON result to PATH (spark-submit merges stderr into stdout)",
        )
    return p


def table_command(sub: argparse._SubParsersAction, name: str, help: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, parents=[common_options()], help=help, description=help)
    p.add_argument("table", metavar="TABLE", help="local path or s3://bucket/prefix of the base table")
    return p


def add_engine(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine",
        choices=["local", "spark"],
        default="local",
        help="local: in-process; spark: the active Spark session or a local one",
    )


def positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return n


def non_negative_float(text: str) -> float:
    try:
        n = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return n


def open_table_arg(args: argparse.Namespace) -> Table:
    return open_table(args.table, args.storage_options)


def emit(args: argparse.Namespace, doc: dict[str, Any], human: Callable[[], str]) -> None:
    """The JSON document on stdout with ``--json`` (and to ``--result-file``), else text."""
    if getattr(args, "result_file", None):
        with open(args.result_file, "w") as f:
            json.dump(doc, f, indent=2, default=str)
    if getattr(args, "json", False):
        json.dump(doc, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print(human())
