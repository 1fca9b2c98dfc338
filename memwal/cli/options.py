"""Command-line flags derived from the actions' options classes (memwal.actions.options).

One flag per option, with the option's own check as argparse ``type=``, so a value refused
on the command line is refused the same way from Python and from a DAG config.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from memwal.actions.options import CHECKS, JobOptions, flag_of, spec_of
from memwal.cli.commands.common import argparse_type


def add_arguments(parser: argparse.ArgumentParser, cls: type[JobOptions], *, common: bool = True,
                  skip: tuple[str, ...] = ()) -> None:
    """Add one flag per option; the parsed namespace feeds :func:`from_namespace`."""
    for f in fields(cls):
        if f.name in skip or (not common and f.name in {g.name for g in fields(JobOptions)}):
            continue
        spec = spec_of(f)
        flag = flag_of(f.name, spec)
        if spec.kind == "flag":
            parser.add_argument(flag, dest=f.name, action="store_true", default=None, help=spec.help)
        elif spec.kind == "names":
            parser.add_argument(flag, dest=f.name, action="append", default=None, metavar=spec.metavar,
                                help=spec.help)
        elif spec.kind == "choice":
            parser.add_argument(flag, dest=f.name, choices=spec.choices, default=None,
                                help=f"{spec.help} (default {f.default})")
            if f.name == "engine":
                add_engine_addresses(parser)
        else:
            parser.add_argument(flag, dest=f.name, type=argparse_type(CHECKS[spec.kind]), default=None,
                                metavar=spec.metavar, help=spec.help)


def add_engine_addresses(parser: argparse.ArgumentParser) -> None:
    """``--spark-remote URL``: the Spark engine over Spark Connect; ``--ray-address ADDRESS``: the
    Ray engine on that cluster (:func:`memwal.cli.main.use_engine_address`)."""
    parser.add_argument("--spark-remote", metavar="URL",
                        help="run the spark engine over Spark Connect at URL (sc://host:port; implies --engine spark); "
                             "a URL with a token belongs in the SPARK_REMOTE variable, not on the command line")
    parser.add_argument("--ray-address", metavar="ADDRESS",
                        help="run the ray engine on the Ray cluster at ADDRESS (host:port of its head, or "
                             "ray://host:10001; implies --engine ray; default: RAY_ADDRESS, else a local Ray)")


def from_namespace(cls: type[JobOptions], ns: argparse.Namespace) -> JobOptions:
    """Options from parsed arguments (absent flags keep their defaults)."""
    return cls.from_kwargs(**{f.name: getattr(ns, f.name, None) for f in fields(cls)})
