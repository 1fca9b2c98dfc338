"""Compaction benchmark: ``python -m bench read compaction --out DIR [--merges N] [--no-spark]``.

Builds a table the way production fragments one: ``N`` small merges (one generation each,
written by pylance's ShardWriter), so the base table ends with about N fragments and as
many deletion files. On identical copies it then times, as ratios:

* a full scan of the base table before and after ``memwal compact`` (``scan_speedup``);
* ``memwal compact`` with the local engine against the Spark engine (local[2]), both
  in-process, Spark's session already started (its start-up is reported apart).

Writes ``OUT/compaction.json``. Figures, never assertions: tests check correctness.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.data.tables import copy_table
from bench.harness.results import Run, parser


def _scan_seconds(uri: str, repeat: int = 5) -> float:
    import lance

    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        lance.dataset(uri).to_table()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def build(path: str, merges: int) -> dict:
    """A base table fragmented by ``merges`` single-generation merges."""
    import memwal
    from memwal.demo import Workload, create_base_table, write_generations

    # One shard: each merge of one generation is one commit, so `merges` merges leave
    # about `merges` fragments (and deletion files), as a trickle of small merges does.
    wl = Workload(base_rows=20_000, shards=1, generations=merges, rows_per_generation=200, indexes=True, seed=5)
    _, model = create_base_table(path, wl)
    write_generations(path, wl, model)
    table = memwal.open(path)
    t0 = time.perf_counter()
    while table.merge(max_generations=1).value.version is not None:
        pass
    import lance

    return {"merges": merges, "merge_seconds": round(time.perf_counter() - t0, 2),
            "fragments": len(lance.dataset(path).get_fragments()), "rows": lance.dataset(path).count_rows()}


def compact_seconds(uri: str, engine: str) -> tuple[float, dict]:
    from memwal import actions
    from memwal.actions.options import CompactOptions
    from memwal.table import open_table

    t0 = time.perf_counter()
    doc = actions.run("compact", open_table(uri), CompactOptions.from_kwargs(engine=engine)).to_dict()
    return time.perf_counter() - t0, doc


def run(work: Path, *, merges: int = 200, spark: bool = True) -> dict[str, Any]:
    pristine = str(work / "pristine")
    doc: dict[str, Any] = {"table": build(pristine, merges)}
    local = copy_table(pristine, work / "local")
    before = _scan_seconds(local)
    seconds, result = compact_seconds(local, "local")
    after = _scan_seconds(local)
    doc["scan_seconds_before"], doc["scan_seconds_after"] = round(before, 4), round(after, 4)
    doc["scan_speedup"] = round(before / after, 2) if after else None
    doc["local"] = {"seconds": round(seconds, 2), "fragments_before": result["fragments_before"],
                    "fragments_after": result["fragments_after"]}
    if spark:
        from memwal.spark.engine.session import active_or_local

        t0 = time.perf_counter()
        sc = active_or_local("memwal-bench-compaction")
        startup = time.perf_counter() - t0
        try:
            copy = copy_table(pristine, work / "spark")
            seconds, result = compact_seconds(copy, "spark")
        finally:
            sc.stop()
        doc["spark"] = {"seconds": round(seconds, 2), "session_startup_seconds": round(startup, 2),
                        "fragments_after": result["fragments_after"]}
        doc["spark_over_local"] = round(seconds / doc["local"]["seconds"], 2)
    return doc


def summary(doc: dict[str, Any]) -> str:
    line = (f"compaction after {doc['table']['merges']} merges: {doc['local']['fragments_before']} -> "
            f"{doc['local']['fragments_after']} fragments; scan {doc['scan_seconds_before']}s -> "
            f"{doc['scan_seconds_after']}s ({doc['scan_speedup']}x); local {doc['local']['seconds']}s")
    if "spark" in doc:
        line += f", spark {doc['spark']['seconds']}s ({doc['spark_over_local']}x local)"
    return line


def main(argv: list[str] | None = None) -> int:
    p = parser("read compaction", __doc__)
    p.add_argument("--merges", type=int, default=200)
    p.add_argument("--no-spark", action="store_true")
    args = p.parse_args(argv)
    with Run("compaction", "a scan before and after memwal compact; local against Spark", out=args.out,
             work=args.work) as bench:
        bench.doc.update(run(bench.work, merges=args.merges, spark=not args.no_spark))
        bench.publish(summary=summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
