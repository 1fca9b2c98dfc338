"""``spark-submit jobs/maintenance.py TABLE [--jobs merge,catchup,snapshot,gc] [gc options]``.

The whole maintenance cycle in one Spark application (one JVM start instead of four):
merge, then index catch-up, then snapshot refresh, then GC, each through the Spark
engine and the same ``memwal.actions.run_action`` the CLI uses. Stops at the first job
that fails, with that job's exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from pyspark.sql import SparkSession

    from jobs._entry import warn_secret_arguments
    from memwal import validate
    from memwal.actions import ACTIONS, run_action
    from memwal.cli import configure_logging
    from memwal.commands.common import non_negative_float, parse_storage_options
    from memwal.errors import MemWalError
    from memwal.secret_options import with_options_file
    from memwal.table import open_table

    p = argparse.ArgumentParser(prog="maintenance.py", description=__doc__.split("\n\n")[0])
    p.add_argument("table")
    p.add_argument("--jobs", default=",".join(ACTIONS), help="comma-separated, in order (default: all four)")
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--storage-options-file", metavar="PATH", help="JSON object of storage options (mode 0600)")
    p.add_argument("--grace-seconds", type=non_negative_float, default=None)
    p.add_argument("--expire-versions", type=non_negative_float, default=None)
    p.add_argument("--result-file", help="write the per-job JSON results here")
    args = p.parse_args(argv)
    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    unknown = [j for j in jobs if j not in ACTIONS]
    if unknown:
        p.error(f"unknown job(s): {', '.join(unknown)}")
    configure_logging(False)
    warn_secret_arguments(list(sys.argv[1:] if argv is None else argv))
    try:  # bad options are bad input: refuse them before starting Spark
        storage_options = with_options_file(args.storage_options_file, parse_storage_options(args.storage_option))
        validate.storage_options(storage_options)
    except MemWalError as exc:
        print(f"memwal: error: {exc}", file=sys.stderr)
        return exc.exit_code
    spark = SparkSession.builder.appName("memwal-maintenance").getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("MEMWAL_SPARK_LOG_LEVEL", "WARN"))
    results: dict[str, dict] = {}
    code = 0
    try:
        table = open_table(args.table, storage_options)
        for job in jobs:
            options = (
                {"grace_seconds": args.grace_seconds, "expire_versions": args.expire_versions} if job == "gc" else {}
            )
            results[job] = run_action(job, table, engine="spark", **options)
            print(f"memwal {job}: {summary(job, results[job])}", file=sys.stderr)
            if results[job].get("blocked") and job == "merge":
                code = 1
                break
    except MemWalError as exc:
        print(f"memwal: error: {exc}", file=sys.stderr)
        code = exc.exit_code
    finally:
        spark.stop()
    if args.result_file:
        with open(args.result_file, "w") as f:
            json.dump(results, f, indent=2, default=str)
    return code


def summary(job: str, doc: dict) -> str:
    if job == "merge":
        return f"version {doc['version']}, {len(doc['shards'])} shards merged, {len(doc['blocked'])} blocked"
    if job == "catchup":
        return f"version {doc['version']}, " + ", ".join(f"{i['index_name']}={i['action']}" for i in doc["indexes"])
    if job == "snapshot":
        return (
            f"version {doc['version']}, {doc['num_shards']} shards stored {doc['storage']}, "
            f"{doc['repairs']} progress repairs"
        )
    if job == "gc":
        return (
            f"{len(doc['deleted'])} generations and {doc['wal_entries_deleted']} WAL entries deleted, "
            f"{doc['bytes_freed']} bytes freed, {len(doc['blocked'])} blocked"
        )
    return json.dumps({k: v for k, v in doc.items() if not isinstance(v, (list, dict))}, default=str)


if __name__ == "__main__":
    raise SystemExit(main())
