"""Shared shell of the ``spark-submit`` entry points.

Each job file is ``spark-submit jobs/<action>.py TABLE [options]``: it makes the SparkContext
spark-submit configured (cluster or local; no SparkSession, which the engines do not use)
and runs the same CLI command with the Spark engine, so flags, JSON output and exit codes
are those of ``memwal``.

Credentials never belong in these arguments: spark-submit, its JVM and the Python driver
all carry them in their command lines, which every local user can read. Launchers pass
``--storage-options-file PATH`` (a 0600 JSON file, see ``memwal.core.secrets``) instead.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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
def spark_session(app: str) -> Iterator[SparkSession]:
    """The session every engine of this process uses (:func:`memwal.spark.engine.session.use_session`):
    a Spark Connect client when a remote is set, else a session over the context spark-submit
    configured (its --conf wins), quiet; stopped (a Connect client: released) on the way out.

    Quiet from the start: ``spark.log.level`` applies while the SparkContext starts, so its
    INFO lines never print (``setLogLevel`` afterwards would come too late for them). Python
    workers import the installed pyspark when it matches Spark's (``PYTHON_DAEMON``: the
    executors import memwal for every task anyway). A ``--conf`` given to spark-submit for
    either is kept.
    """
    from memwal.spark.engine.session import PYTHON_DAEMON, bound_retries, connect_session, remote_url, use_session
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    url = remote_url()
    if url is None and "PYSPARK_GATEWAY_PORT" in os.environ:
        # Under spark-submit (its JVM is up: asking starts none), `--remote URL` or
        # `--conf spark.remote=URL` names a Spark Connect endpoint in its configuration.
        SparkContext._ensure_initialized()
        url = SparkConf().get("spark.remote", None)
    if url is not None:
        remote = connect_session(url)
        use_session(remote)
        try:
            yield remote
        finally:
            with contextlib.suppress(Exception):  # a server gone is the job's error, said already
                bound_retries(remote, 0)
                remote.stop()  # releases the server's side of the session
        return
    # The JVM first (spark-submit's, already running): a SparkConf made before it holds none of
    # spark-submit's settings, and ours would then replace a --conf given for the same key.
    SparkContext._ensure_initialized()
    conf = SparkConf().setAppName(app)
    conf.setIfMissing("spark.log.level", os.environ.get("MEMWAL_SPARK_LOG_LEVEL", "WARN"))
    conf.setIfMissing("spark.python.daemon.module", PYTHON_DAEMON)
    sc = SparkContext.getOrCreate(conf)
    spark = SparkSession(sc)
    use_session(spark)
    try:
        yield spark
    finally:
        sc.stop()


def run(action: str, argv: Sequence[str] | None = None, *, app: str | None = None) -> int:
    """``memwal <action> ARGS --engine spark`` inside the submitted application (named
    ``memwal-<action>`` unless ``app`` says otherwise)."""
    from memwal.cli import main

    args = list(sys.argv[1:] if argv is None else argv)
    warn_secret_arguments(args)
    with spark_session(app or f"memwal-{action}"):
        if "--engine" not in args:
            args += ["--engine", "spark"]
        return main([action, *args])
