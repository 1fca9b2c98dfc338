"""Shared shell of the ``spark-submit`` entry points.

Each job file is ``spark-submit jobs/<action>.py TABLE [options]``: it takes the session
spark-submit configured (cluster or local) and runs the same CLI command with the Spark
engine, so flags, JSON output and exit codes are those of ``memwal``.

Credentials never belong in these arguments: spark-submit, its JVM and the Python driver
all carry them in their command lines, which every local user can read. Launchers pass
``--storage-options-file PATH`` (a 0600 JSON file, see ``memwal.core.secrets``) instead.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence


def warn_secret_arguments(args: list[str]) -> None:
    """Say so when credentials came on the command line (they are already visible in ``ps``)."""
    from memwal.core.secrets import secret_keys_on_argv

    keys = secret_keys_on_argv(args)
    if keys:
        print(
            f"memwal: warning: storage option(s) {', '.join(keys)} given on the command line, readable by every "
            "local user: pass them in --storage-options-file PATH (mode 0600) instead",
            file=sys.stderr,
        )


@contextlib.contextmanager
def spark_session(app: str) -> Iterator[object]:
    """The session spark-submit configured (its --conf wins), quiet, stopped on the way out.

    Quiet from the start: ``spark.log.level`` applies while the SparkContext starts, so its
    INFO lines never print (``setLogLevel`` afterwards would come too late for them). Python
    workers import the installed pyspark when it matches Spark's (``PYTHON_DAEMON``: the
    executors import memwal for every task anyway). A ``--conf`` given to spark-submit for
    either is kept.
    """
    from memwal.spark.engine.session import PYTHON_DAEMON
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    submitted = SparkConf()
    builder = SparkSession.builder.appName(app)
    if not submitted.contains("spark.log.level"):
        builder = builder.config("spark.log.level", os.environ.get("MEMWAL_SPARK_LOG_LEVEL", "WARN"))
    if not submitted.contains("spark.python.daemon.module"):
        builder = builder.config("spark.python.daemon.module", PYTHON_DAEMON)
    spark = builder.getOrCreate()
    try:
        yield spark
    finally:
        spark.stop()


def run(action: str, argv: Sequence[str] | None = None) -> int:
    """``memwal <action> ARGS --engine spark`` inside the submitted application."""
    from memwal.cli import main

    args = list(sys.argv[1:] if argv is None else argv)
    warn_secret_arguments(args)
    with spark_session(f"memwal-{action}"):
        if "--engine" not in args:
            args += ["--engine", "spark"]
        return main([action, *args])
