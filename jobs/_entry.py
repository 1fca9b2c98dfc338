"""Shared shell of the ``spark-submit`` entry points.

Each job file is ``spark-submit jobs/<action>.py TABLE [options]``: it takes the session
spark-submit configured (cluster or local) and runs the same CLI command with the Spark
engine, so flags, JSON output and exit codes are those of ``memwal`` (DESIGN.md section 5).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence


def run(action: str, argv: Sequence[str] | None = None) -> int:
    from pyspark.sql import SparkSession

    from memwal.cli import main

    args = list(sys.argv[1:] if argv is None else argv)
    spark = SparkSession.builder.appName(f"memwal-{action}").getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("MEMWAL_SPARK_LOG_LEVEL", "WARN"))
    try:
        if "--engine" not in args:
            args += ["--engine", "spark"]
        return main([action, *args])
    finally:
        spark.stop()
