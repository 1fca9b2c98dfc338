"""``spark-submit jobs/maintenance.py TABLE [--jobs merge,catchup,compact,snapshot,gc] [job options]``.

The whole maintenance cycle in one Spark application (one JVM start instead of five):
merge, index catch-up, compaction, snapshot refresh and GC, each through the Spark engine
and ``memwal.actions``, exactly as ``memwal <job> --engine spark`` would run it. The job
options are the jobs' own flags (``--max-generations``, ``--grace-seconds``,
``--expire-versions``, ... derived from their options classes, as for ``memwal
backfill``). Stops at the first job that fails, with that job's exit code;
``--result-file`` receives ``{job: result document}`` for the jobs that ran and, when one
failed, ``"failure": {"job": ..., "error": ..., "exit_code": ...}``.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    from memwal.spark._entry import spark_context, warn_secret_arguments

    from memwal.actions import ACTIONS, run_action
    from memwal.backfill import FAILED, parse_jobs, run_job
    from memwal.cli import configure_logging
    from memwal.cli.commands.backfill import add_job_arguments, job_options_from
    from memwal.cli.commands.common import check_result_file, parse_storage_options, write_failure
    from memwal.core.secrets import with_options_file
    from memwal.errors import MemWalError
    from memwal.store.options import check_storage_options

    p = argparse.ArgumentParser(prog="maintenance.py", description=__doc__.split("\n\n")[0])
    p.add_argument("table")
    p.add_argument("--jobs", default=",".join(ACTIONS), help=f"comma-separated (default: {','.join(ACTIONS)})")
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--storage-options-file", metavar="PATH", help="JSON object of storage options (mode 0600)")
    p.add_argument("--result-file", help="write the per-job JSON results here")
    add_job_arguments(p)
    args = p.parse_args(argv)
    configure_logging(False)
    warn_secret_arguments(list(sys.argv[1:] if argv is None else argv))
    result_file = None
    try:  # bad input is refused before Spark starts
        check_result_file(args.result_file)
        result_file = args.result_file
        jobs = parse_jobs(args.jobs)
        storage_options = with_options_file(args.storage_options_file, parse_storage_options(args.storage_option))
        check_storage_options(storage_options)
        options = job_options_from(args)
        for job in jobs:
            ACTIONS[job].options.from_kwargs(**options[job])
    except MemWalError as exc:
        print(f"memwal: error: {exc}", file=sys.stderr)
        write_failure(result_file, str(exc), exc.exit_code)
        return exc.exit_code
    results: dict[str, dict] = {}
    code = 0
    from memwal.observe.otel import configure_from_env

    configure_from_env()
    with spark_context("memwal-maintenance"):
        for job in jobs:
            run = run_job(run_action, args.table, job, storage_options, "spark", options[job])
            if run.result is not None:
                results[job] = run.result
            if run.status == FAILED:
                print(f"memwal: error: {job}: {run.error}", file=sys.stderr)
                code = run.exit_code or 1
                results["failure"] = {"job": job, "error": run.error, "exit_code": code}
                break
            print(f"memwal {job}: {run.summary}", file=sys.stderr)
    if args.result_file:
        with open(args.result_file, "w") as f:
            json.dump(results, f, indent=2, default=str)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
