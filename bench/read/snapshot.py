"""Snapshot refresh benchmark: ``python -m bench read snapshot [--shards 1000] [--no-spark] [--out DIR]``.

Builds a MemWAL table with ``shards`` shards through pylance's own ``ShardWriter``
(``memwal.demo``: one bucket per shard, two flushed generations of two rows each;
about 10 ms per shard on a laptop-class machine, so real shards are cheap enough and no
shard directories are copied or forged), then times:

* the local refresh: shard manifests read with 1 and with 16 threads and with the
  reader's own choice (1 thread on a local disk, 16 on an object store), then the
  encode (a Lance file: above 100 shards it goes to ``_indices/<uuid>/index.lance``)
  and the guarded commit (forced: the table is idle, and an idle refresh commits nothing);
* the idle refresh: the plan finds no shard changed since the published snapshot and the
  execute commits nothing (what a scheduled refresh of a quiet table costs);
* the Spark refresh: the same plan with the manifests read on executors, once cold
  (session start-up included when this function starts the session) and once warm;
* what readers gain: listing every shard's state from the published snapshot versus from
  the shard manifests (``memwal.read.plan_read``), with and without the freshness check.

Seconds and ratios; nothing is asserted. :func:`run`'s ``spark``: a SparkContext to use, ``None``
to start a local one (and stop it after), or ``False`` to skip the Spark engine.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness.results import Run, parser

REPEAT = 3


def _median(fn, repeat: int = REPEAT) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def build(uri: str, shards: int) -> float:
    """A table with ``shards`` bucket shards written by ShardWriter; returns seconds taken."""
    from memwal.demo import Workload, create_base_table, write_generations

    wl = Workload(base_rows=1000, shards=shards, generations=2, rows_per_generation=2, indexes=False, seed=11)
    t0 = time.perf_counter()
    _, model = create_base_table(uri, wl)
    write_generations(uri, wl, model)
    return time.perf_counter() - t0


def run(workdir: str, shards: int = 1000, spark: Any = None) -> dict[str, Any]:
    from memwal.read import plan_read
    from memwal.snapshot import LocalSnapshotEngine, execute_snapshot, plan_snapshot
    from memwal.table import open_table

    work = Path(workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    uri = str(work / "table")
    doc: dict[str, Any] = {"shards": shards}
    doc["build_seconds"] = round(build(uri, shards), 3)
    table = open_table(uri)

    seq_read, _ = _median(lambda: plan_snapshot(table, reader=LocalSnapshotEngine(threads=1)))
    pool16_read, _ = _median(lambda: plan_snapshot(table, reader=LocalSnapshotEngine(threads=16)))
    pool_read, plan = _median(lambda: plan_snapshot(table, reader=LocalSnapshotEngine()))  # its own choice
    assert plan.num_shards == shards, (plan.num_shards, shards)

    def local_refresh():
        p = plan_snapshot(table, reader=LocalSnapshotEngine(), force=True)
        return execute_snapshot(table, p)

    local_total, res = _median(local_refresh)

    def idle_refresh():
        return execute_snapshot(table, plan_snapshot(table, reader=LocalSnapshotEngine()))

    idle_total, idle = _median(idle_refresh)
    assert idle.version is None, idle.to_dict()
    doc["local"] = {
        "read_seconds_1_thread": round(seq_read, 4),
        "read_seconds_16_threads": round(pool16_read, 4),
        "read_seconds": round(pool_read, 4),
        "refresh_seconds": round(local_total, 4),
        "idle_refresh_seconds": round(idle_total, 4),
        "commit_seconds": round(res.commit_seconds, 4),
        "storage": res.storage,
        "snapshot_bytes": res.bytes,
        "repairs": res.repairs,
    }

    # Readers: every shard's state from the snapshot versus from the manifests.
    manifests, _ = _median(lambda: plan_read(table, source="manifests"))
    index_checked, p = _median(lambda: plan_read(table, source="index"))
    index_trusting, _ = _median(lambda: plan_read(table, source="index", check_fresh=False))
    doc["reader"] = {
        "manifests_seconds": round(manifests, 4),
        "index_seconds": round(index_checked, 4),
        "index_unchecked_seconds": round(index_trusting, 4),
        "fallbacks": len(p.fallbacks),
    }

    if spark is not False:
        doc["spark"] = _spark_part(table, spark, plan.rows)
    else:
        doc["spark"] = {"skipped": "spark=False"}
    doc["ratios"] = {
        "read_16_threads_over_1_thread": round(pool16_read / seq_read, 2) if seq_read else None,
        "manifest_listing_over_index_listing": round(manifests / index_checked, 2) if index_checked else None,
    }
    if "read_seconds_warm" in doc["spark"]:
        doc["ratios"]["local_read_over_spark_read_warm"] = round(pool_read / doc["spark"]["read_seconds_warm"], 2)
        doc["ratios"]["local_refresh_over_spark_refresh_warm"] = round(
            local_total / doc["spark"]["refresh_seconds_warm"], 2
        )
    shutil.rmtree(work, ignore_errors=True)
    return doc


def _spark_part(table, spark, local_rows) -> dict[str, Any]:
    from memwal.snapshot import execute_snapshot, plan_snapshot

    started_here = False
    t0 = time.perf_counter()
    try:
        from memwal.spark.engine.runner import SparkRunner

        from memwal.tasks.snapshot import TaskManifestReader

        if spark is None:
            from memwal.spark.engine.session import active_or_local

            spark = active_or_local("memwal-bench-snapshot")
            spark.sparkContext.setLogLevel("ERROR")
            started_here = True
    except Exception as exc:  # noqa: BLE001 - no Spark here: recorded, not fatal
        return {"skipped": f"{type(exc).__name__}: {exc}"}
    try:
        reader = TaskManifestReader(SparkRunner(spark))
        plan = plan_snapshot(table, reader=reader)
        cold = time.perf_counter() - t0
        warm_read, plan = _median(lambda: plan_snapshot(table, reader=reader))

        def refresh():
            return execute_snapshot(table, plan_snapshot(table, reader=reader, force=True))

        warm_total, res = _median(refresh)
        return {
            "read_seconds_cold": round(cold, 4),
            "read_seconds_warm": round(warm_read, 4),
            "refresh_seconds_warm": round(warm_total, 4),
            "session_started_here": started_here,
            "default_parallelism": spark.defaultParallelism,
            "storage": res.storage,
            "rows_equal_local": plan.rows == local_rows,
        }
    finally:
        if started_here:
            spark.stop()


def main(argv: list[str] | None = None) -> int:
    p = parser("read snapshot", __doc__)
    p.add_argument("--shards", type=int, default=1000)
    p.add_argument("--no-spark", action="store_true", help="skip the Spark engine")
    args = p.parse_args(argv)
    # Spark runs in this process: keep its console progress bar out of the summary
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.showConsoleProgress=false pyspark-shell")
    with Run("snapshot_refresh", "the snapshot refresh, and what readers gain from it", out=args.out,
             work=args.work) as bench:
        bench.doc.update(run(str(bench.work / "snapshot"), shards=args.shards, spark=False if args.no_spark else None))
        bench.publish(summary=summary)
    return 0


def summary(doc: dict[str, Any]) -> str:
    local, r = doc["local"], doc["ratios"]
    return (f"snapshot refresh, {doc['shards']} shards: read {local['read_seconds']}s (16 threads over 1: "
            f"{r['read_16_threads_over_1_thread']}x), refresh {local['refresh_seconds']}s, idle "
            f"{local['idle_refresh_seconds']}s; readers: manifests over the snapshot "
            f"{r['manifest_listing_over_index_listing']}x")


if __name__ == "__main__":
    sys.exit(main())
