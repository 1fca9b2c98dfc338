"""Snapshot refresh benchmark: ``run(workdir, shards=1000, spark=None) -> dict``.

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

Returns seconds and ratios; nothing is asserted (``bench/run.py`` records it).
``spark``: a SparkContext to use, ``None`` to start a local one (and stop it after), or
``False`` to skip the Spark engine.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path
from typing import Any

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
        from memwal.spark.engine.snapshot import SparkManifestReader

        if spark is None:
            from memwal.spark.engine.session import active_or_local

            spark = active_or_local("memwal-bench-snapshot")
            spark.sparkContext.setLogLevel("ERROR")
            started_here = True
    except Exception as exc:  # noqa: BLE001 - no Spark here: recorded, not fatal
        return {"skipped": f"{type(exc).__name__}: {exc}"}
    try:
        reader = SparkManifestReader(spark)
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


if __name__ == "__main__":
    import json
    import sys
    import tempfile

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    with tempfile.TemporaryDirectory() as d:
        print(json.dumps(run(d, shards=n), indent=2))
