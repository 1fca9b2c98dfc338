"""The operator CLI ``memwal``: :func:`main` parses, dispatches and maps errors to exit codes
(:mod:`memwal.cli.main`); each command lives in :mod:`memwal.cli.commands`; the job flags come
from the actions' options classes (:mod:`memwal.cli.options`)."""

from memwal.cli.main import build_parser, configure_logging, main

__all__ = ["build_parser", "configure_logging", "main"]
