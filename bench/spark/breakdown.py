"""Where the Spark merge engine's time goes: ``python -m bench spark breakdown [--full] [--out DIR]``.

For each size (400k and 2M change rows; 10M with ``--full``) it builds a table once with
pylance's ShardWriter (:mod:`bench.data.tables`; reused from ``--work`` when already built), then on
fresh copies of it:

* times ``memwal merge COPY --engine local`` and ``memwal merge COPY --engine spark`` as whole
  processes (JVM start-up included; local mode, ``MEMWAL_SPARK_MASTER`` or ``local[2]``),
  three of each, interleaved, on fresh copies (the medians are compared), after one untimed
  run of each (in ``make bench`` the growth tables before it push Spark's jars out of the page
  cache: the first Spark runs took 4.4-5.2 s against 2.9-3.2 s once warm), and checks that
  both give the identical base table and progress;
* runs the Spark engine in this process with a stopwatch on each phase: start-up (JVM and
  session), plan, executors (read, dedupe or fold, write of the staged upserts, by shard or
  through a keyed shuffle, the job's ``shape``: wall time, plus the task seconds of each step
  summed over tasks), the staging commit, and
  the driver's commits (driverless: the data commit and the marker; on the driver path the
  bound delete pass and the marked ``merge_insert``).

Writes ``OUT/spark_breakdown.json``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.data.tables import TableSpec, cached_table, copy_table
from bench.harness.processes import env, memwal
from bench.harness.results import Run, log, parser
from bench.merge.compare import table_state

SIZES = (400_000, 2_000_000)
#: Whole-process runs per engine and size (interleaved; the median is reported).
REPEATS = 3
#: Seconds between whole-process runs, not timed: a finished run's JVM takes a moment to exit.
PAUSE = 2.0
FULL_SIZES = (*SIZES, 10_000_000)
BASE_ROWS = 500_000


def ensure_table(work: Path, change_rows: int) -> tuple[str, dict]:
    """The pristine table of one size, built once per work directory."""
    log(f"the table with {change_rows:,} change rows (built once per --work)", "spark")
    return cached_table(work, f"table-{change_rows}", TableSpec(base_rows=BASE_ROWS, change_rows=change_rows))


def fresh_copy(pristine: str, dst: Path) -> str:
    return copy_table(pristine, dst)


def whole_process(engine: str, table: str) -> dict[str, Any]:
    """``memwal merge TABLE --engine ENGINE --json`` timed from exec to exit."""
    return memwal("merge", table, "--engine", engine, "--json", env=env()).figures()


def in_process(sc, table_uri: str) -> dict:
    """The Spark engine's phases, timed on the driver (see the module docstring)."""
    from memwal.spark.engine.merge import SparkMergeEngine

    from memwal.merge import execute_merge, plan_merge
    from memwal.table import open_table

    marks: dict[str, float] = {}
    t0 = time.perf_counter()
    table = open_table(table_uri)
    plan = plan_merge(table)
    marks["plan"] = time.perf_counter()
    engine = SparkMergeEngine(sc)
    execute_merge(table, plan, engine, on_step=lambda name: marks.setdefault(name, time.perf_counter()))
    end = time.perf_counter()
    t = engine.last_timings
    read_end = marks["after-read"]
    delete = marks["after-delete-pass"] - marks["before-delete-commit"] if "before-delete-commit" in marks else 0.0
    data = marks["after-data-commit"] - marks["before-data-commit"] if "before-data-commit" in marks else 0.0
    marked = marks.get("after-upsert-commit", marks.get("after-marked-commit", end)) - marks["before-marked-commit"]
    return {
        "plan_seconds": marks["plan"] - t0,
        "executors_wall_seconds": t["executors_wall_seconds"],
        "read_task_seconds": t["read_task_seconds"],
        "dedupe_task_seconds": t["reduce_task_seconds"],
        "write_task_seconds": t["write_task_seconds"],
        "find_base_rows_task_seconds": t["find_task_seconds"],
        "retire_task_seconds": t["retire_task_seconds"],
        "staging_commit_seconds": t["staging_commit_seconds"],
        "engine_seconds": read_end - marks["plan"],
        "delete_commit_seconds": delete,
        "data_commit_seconds": data,
        "commit_path": t["commit_path"],
        "marked_commit_seconds": marked,
        "driver_commit_seconds": end - read_end,
        "total_seconds": end - t0,
        "shape": t["shape"],
        "read_tasks": t["read_tasks"],
        "partitions": t["partitions"],
        "change_bytes": t["change_bytes"],
    }


def one_size(sc, startup: float, work: Path, change_rows: int, repeats: int = REPEATS) -> dict:
    pristine, info = ensure_table(work, change_rows)
    point: dict = {"change_rows": info["change_rows"], "generations": info["generations"], "table_bytes": info["bytes"]}
    runs: dict[str, list[dict]] = {"local": [], "spark": []}
    for engine in ("local", "spark"):  # not timed: each engine's code and jars in the page cache
        log(f"{change_rows:,}: memwal merge --engine {engine} (warm-up)")
        whole_process(engine, fresh_copy(pristine, work / f"copy-{change_rows}-{engine}"))
    for i in range(repeats):  # interleaved, each on a fresh copy: both engines see the same machine load
        for engine in ("local", "spark"):
            log(f"{change_rows:,}: memwal merge --engine {engine} ({i + 1}/{repeats})")
            copy = fresh_copy(pristine, work / f"copy-{change_rows}-{engine}")
            time.sleep(PAUSE)  # the previous run's JVM is still exiting
            runs[engine].append(whole_process(engine, copy))
    for engine, done in runs.items():
        point[f"{engine}_process"] = {"seconds": statistics.median(r["seconds"] for r in done),
                                      "runs": [r["seconds"] for r in done],
                                      "exit_code": max(r["exit_code"] for r in done)}
        errors = [r["error"] for r in done if "error" in r]
        if errors:
            point[f"{engine}_process"]["error"] = errors[-1]
    copies = {e: str(work / f"copy-{change_rows}-{e}") for e in ("local", "spark")}
    copies["inproc"] = fresh_copy(pristine, work / f"copy-{change_rows}-inproc")
    ok = all(point[f"{e}_process"]["exit_code"] == 0 for e in ("local", "spark"))
    if ok:
        local_rows, local_progress = table_state(copies["local"])
        spark_rows, spark_progress = table_state(copies["spark"])
        point["identical"] = local_rows.equals(spark_rows) and local_progress == spark_progress
        point["spark_over_local"] = round(point["spark_process"]["seconds"] / point["local_process"]["seconds"], 2)
    log(f"{change_rows:,}: Spark engine in process, phase by phase", "spark")
    phases = in_process(sc, copies["inproc"])
    phases["startup_seconds"] = startup
    point["spark_phases"] = {k: round(v, 3) if isinstance(v, float) else v for k, v in phases.items()}
    for path in copies.values():
        shutil.rmtree(path, ignore_errors=True)
    return point


def run(work: Path, *, full: bool = False) -> dict[str, Any]:
    """Build (or reuse) the tables and measure every size in one Spark session."""
    import pyspark
    from memwal.spark.engine import jvm_archive
    from memwal.spark.engine.session import active_or_local

    t0 = time.perf_counter()
    sc = active_or_local("memwal-spark-breakdown")
    startup = time.perf_counter() - t0
    try:
        points = [one_size(sc, startup, work, n) for n in (FULL_SIZES if full else SIZES)]
    finally:
        sc.stop()
    return {"master": os.environ.get("MEMWAL_SPARK_MASTER", "local[2]"), "pyspark": pyspark.__version__,
            # the driver JVM's class archive (memwal.spark.engine.jvm_archive), if this machine has one
            "jvm_archive": jvm_archive.java_options() or None, "points": points}


def summary(doc: dict[str, Any]) -> str:
    lines = []
    for pt in doc["points"]:
        ph = pt["spark_phases"]
        lines.append(f"{pt['change_rows']:>10,} rows: local {pt['local_process']['seconds']}s, "
                     f"spark {pt['spark_process']['seconds']}s, ratio {pt.get('spark_over_local')}, "
                     f"identical {pt.get('identical')}; {ph['shape']}; startup {ph['startup_seconds']}s, "
                     f"plan {ph['plan_seconds']}s, executors {ph['executors_wall_seconds']}s (task s: read "
                     f"{ph['read_task_seconds']}, dedupe {ph['dedupe_task_seconds']}, "
                     f"write {ph['write_task_seconds']}), "
                     f"staging commit {ph['staging_commit_seconds']}s, delete pass {ph['delete_commit_seconds']}s, "
                     f"marked commit {ph['marked_commit_seconds']}s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = parser("spark breakdown", __doc__)
    p.add_argument("--full", action="store_true", help="add the 10M change-row point (a long table build)")
    args = p.parse_args(argv)
    out = args.out or "bench-results"
    with Run("spark_breakdown", "where the Spark merge engine's time goes", out=out,
             work=args.work or os.path.join(out, "spark-work")) as bench:
        bench.doc.update(run(bench.work, full=args.full))
        bench.publish(summary=summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
