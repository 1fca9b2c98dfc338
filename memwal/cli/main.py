"""The operator CLI: ``memwal status|merge|catchup|compact|snapshot|gc|scan|verify|lease|merge-ops|backfill|demo-data``.

The contract is what automation depends on: the exit codes (``EXIT_CODES`` in
:mod:`memwal.cli.commands.common`, worded the same in the README); logs on stderr, the
``--json`` document alone on stdout. Each command lives in ``memwal/cli/commands/<name>.py`` as
a thin shell over the core's plan/execute calls; this module only sets up the process (logging,
Arrow's allocator), parses, dispatches and maps errors to exit codes.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence

from memwal.cli.commands import COMMAND_MODULES
from memwal.cli.commands.common import (
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_OK,
    Parser,
    check_result_file,
    parse_storage_options,
    write_failure,
)
from memwal.core.process import configure_process
from memwal.core.text import one_line
from memwal.errors import CancelledError, MemWalError, first_line

log = logging.getLogger("memwal")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="memwal",
        description="Background maintenance of Lance tables with a MemWAL: merge flushed generations, "
        "catch indexes up, compact the base table, refresh the shard snapshot, collect garbage.",
        epilog=f"{EXIT_CODES} Logs go to stderr; with --json the result document alone goes to stdout.",
    )
    from memwal.core.version import __version__

    parser.add_argument("--version", action="version", version=f"memwal {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        module = importlib.import_module(f"memwal.cli.commands.{module_name}")
        if hasattr(module, "add_parsers"):
            module.add_parsers(sub)
            continue
        p = module.add_parser(sub)
        p.set_defaults(run=module.run)
    return parser


class SafeFormatter(logging.Formatter):
    """Log lines whose message is one line of visible characters: a value from storage in a
    message (a record's job, a checkpoint's name) can neither drive the terminal nor forge a
    line of its own. A traceback (``--debug``) follows as it is."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = one_line(record.message)
        return super().formatMessage(record)


def configure_logging(debug: bool) -> None:
    """Our logs go to stderr whatever the host process configured for the root logger."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("memwal",):  # memwal.spark and memwal.airflow log below it
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(logging.DEBUG if debug else logging.INFO)
        logger.propagate = False


def use_engine_address(args: argparse.Namespace) -> None:
    """``--spark-remote URL``: PySpark's own ``SPARK_REMOTE`` for this process, which selects a
    Spark Connect session for the Spark engine (no JVM starts here), and ``--engine spark``;
    ``--ray-address ADDRESS``: Ray's own ``RAY_ADDRESS``, and ``--engine ray``."""
    from memwal.errors import BadInputError

    url, address = getattr(args, "spark_remote", None), getattr(args, "ray_address", None)
    if url is not None and address is not None:
        raise BadInputError("--spark-remote and --ray-address name two engines: give one")
    if address is not None:
        if not address.strip() or any(c.isspace() for c in address):
            raise BadInputError("--ray-address: expected HOST:PORT of a Ray head, or ray://HOST:PORT")
        if getattr(args, "engine", None) not in (None, "ray"):
            raise BadInputError(f"--ray-address runs the ray engine: it cannot go with --engine {args.engine}")
        os.environ["RAY_ADDRESS"] = address
        args.engine = "ray"
        return
    if url is None:
        return
    if not url.startswith("sc://") or len(url) <= len("sc://"):
        raise BadInputError("--spark-remote: expected a Spark Connect URL sc://HOST[:PORT][/;param=value...]")
    if getattr(args, "engine", None) not in (None, "spark"):
        raise BadInputError(f"--spark-remote runs the spark engine: it cannot go with --engine {args.engine}")
    if "token=" in url.lower():  # a secret in process arguments: every local user reads them (ps)
        raise BadInputError("--spark-remote carries a token, which every local user can read on the command line: "
                            "set SPARK_REMOTE in the environment instead (the URL is never shown)")
    os.environ["SPARK_REMOTE"] = url
    args.engine = "spark"


def main(argv: Sequence[str] | None = None) -> int:
    configure_process()
    args = build_parser().parse_args(argv)
    configure_logging(args.debug)
    from memwal.observe.otel import configure_from_env

    configure_from_env()  # only when OTEL_METRICS_EXPORTER asks for an exporter
    result_file = None  # set once checked: a failure is then recorded there too
    try:
        # Imported once a command runs: `memwal --help` must not load the store (or what it leans on).
        from memwal.core.secrets import with_options_file
        from memwal.store.options import check_storage_options

        pairs = parse_storage_options(args.storage_option)
        args.storage_options = with_options_file(getattr(args, "storage_options_file", None), pairs)
        # Everything the user typed is checked before the command touches the table.
        check_storage_options(args.storage_options)
        check_result_file(getattr(args, "result_file", None))
        use_engine_address(args)
        result_file = getattr(args, "result_file", None)
        command: Callable[[argparse.Namespace], int] = args.run
        return command(args)
    except MemWalError as exc:
        if args.debug:
            log.exception("failed")
        print(f"memwal: error: {one_line(str(exc))}", file=sys.stderr)
        write_failure(result_file, str(exc), exc.exit_code, cancelled=isinstance(exc, CancelledError))
        return exc.exit_code
    except KeyboardInterrupt:
        print("memwal: interrupted", file=sys.stderr)
        write_failure(result_file, "interrupted", EXIT_FAILED)
        return EXIT_FAILED
    except BrokenPipeError:  # `memwal status T | head`: the reader left, which is not a failure
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence: one line, not a trace
        if args.debug:
            log.exception("failed")
        # One line naming what failed, never an exception class name (the object is in
        # the message of every error we raise; Lance's Rust locations are dropped).
        target = getattr(args, "table", None) or getattr(args, "dir", None)
        where = f"{target}: " if isinstance(target, str) and target not in str(exc) else ""
        line = f"{where}{first_line(exc, target if isinstance(target, str) else None)}"
        print(f"memwal: error: {one_line(line)} (rerun with --debug for the traceback)", file=sys.stderr)
        write_failure(result_file, line, EXIT_FAILED)
        return EXIT_FAILED
