"""``spark-submit jobs/fleet_chunk.py WORK_FILE [--workers N] [--max-seconds S] --result-file R``.

One chunk of a fleet's planned work as one Spark application: the ``memwal_fleet`` DAG's table
task on the Spark engine (``memwal.airflow.hooks.MemWalHook.run_work``). ``WORK_FILE`` is
``{"work": [TableWork.to_dict(storage_options=True), ...]}`` in a 0600 file of a private folder
(it holds the tables' storage options: never on a command line), removed after the job. Small
tables run as tasks of this application, the local engine inside; large ones through the
per-table Spark engines on the driver (:mod:`memwal.tasks.fleet`). Each job is a
``memwal <job>`` run with its leases and history record.

The result file holds ``{"tables": [CycleResult.to_dict(), ...]}``, or ``{"failure": {"error",
"exit_code"}}`` when the chunk could not run. Exit code: 0, 1 when a table failed, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memwal.cycle import CycleResult
    from memwal.fleet.run import TableWork

MAX_WORK_BYTES = 64 << 20


def main(argv: Sequence[str] | None = None) -> int:
    from memwal.cli.commands.common import EXIT_FAILED, EXIT_OK, check_result_file, positive_int, write_failure
    from memwal.errors import BadInputError, MemWalError, first_line

    p = argparse.ArgumentParser(prog="fleet_chunk.py", description="one chunk of a fleet's planned work on Spark")
    p.add_argument("work_file", metavar="WORK_FILE")
    p.add_argument("--workers", type=positive_int, default=2, help="large tables run on the driver at once")
    p.add_argument("--max-seconds", type=float, help="start no table after S seconds")
    p.add_argument("--result-file", required=True, metavar="PATH")
    args = p.parse_args(argv)
    try:
        check_result_file(args.result_file)
        work = read_work(args.work_file)
        results = run_chunk(work, args.workers, args.max_seconds)
    except MemWalError as exc:
        print(f"memwal: error: {first_line(exc)}", file=sys.stderr)
        write_failure(args.result_file, first_line(exc), exc.exit_code)
        return exc.exit_code
    except (ValueError, KeyError, TypeError) as exc:
        error = BadInputError(f"{args.work_file}: not a fleet chunk's work: {first_line(exc)}")
        write_failure(args.result_file, str(error), error.exit_code)
        return error.exit_code
    with open(args.result_file, "w") as f:
        json.dump({"tables": [r.to_dict() for r in results]}, f, default=str)
    return EXIT_FAILED if any(r.failed for r in results) else EXIT_OK


def read_work(path: str) -> list[TableWork]:
    from memwal.core.files import read_small_bytes
    from memwal.fleet.run import TableWork

    data, _ = read_small_bytes(path, MAX_WORK_BYTES, flag="WORK_FILE", what="JSON work file")
    return [TableWork.from_dict(doc) for doc in json.loads(data)["work"]]


def run_chunk(work: list[TableWork], workers: int, max_seconds: float | None) -> list[CycleResult]:
    from memwal.spark._entry import spark_session
    from memwal.spark.engine.runner import SparkRunner

    from memwal.tasks.fleet import TaskTableRunner

    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    with spark_session("memwal-fleet-chunk") as spark:
        return list(TaskTableRunner(SparkRunner(spark)).run(work, workers, deadline))


if __name__ == "__main__":
    raise SystemExit(main())
