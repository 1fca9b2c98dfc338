"""Many versions: what a day of merging every few seconds costs, and what the retention bounds (issue 62).

Usage::

    .venv/bin/python -m bench read versions [--counts 1000,10000,40000] [--runs 5] [--per-minute 40] [--out DIR]

A follower merges as soon as a shard has work, so a writer that never stops makes the table commit
a version every few seconds (bench/read/follow.py counts them: merges, compactions, snapshot refreshes),
some 40 a minute, 57,600 a day. Every version stays until GC's version expiry takes it
(``--expire-versions``, 7 days by default): 400,000 versions at that rate. What grows with them:

* the ``_versions/`` folder, which every manifest read lists (memwal's own: the jobs, the
  reader; Lance opens the latest version from it too);
* GC's retained-version gate (every retained version's progress, read once and then kept by
  manifest key and ETag: ``_mem_wal/_jobs/retained-progress.json``);
* storage: each version's manifest, and the data files only old versions still name.

Part 1, measured: tables with ``--counts`` versions (a MemWAL table written by pylance's
``ShardWriter`` and merged, then commits that change nothing but the table's config, each a
version with the MemWAL index as a merge leaves it). On each, medians of ``--runs``: Lance's open of
the latest version, memwal's read of the latest manifest (a listing of ``_versions/`` and one
manifest), ``memwal.open(uri).scan()``, GC's plan (its dry run: every version retained) on a cold
and a warm digest, and the folder's bytes. Then one GC that expires all but the newest
(``expire_versions=0``): its time, and the count after.

Part 2, a day simulated: at ``--per-minute`` versions a minute the retention keeps
``per_minute x retention`` versions; each figure of part 1 is read off there (interpolated between
the measured counts, extrapolated past the largest along the last segment's slope) for the
retentions of 10 minutes, an hour, a day and the default 7 days.
JSON to stdout and ``--out``.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness.results import Run, parser

PK = {"lance-schema:unenforced-primary-key": "true"}
SHARD = str(uuid.UUID(int=62))
RETENTIONS = {"10 minutes": 600, "1 hour": 3600, "1 day": 86400, "7 days (the default)": 7 * 86400}


def build(uri: str, versions: int) -> None:
    """A merged MemWAL table of 20 fragments, then commits up to ``versions`` versions."""
    import lance
    import pyarrow as pa

    import memwal

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK), pa.field("v", pa.int64())])
    lance.write_dataset(pa.table({"id": list(range(10_000)), "v": [0] * 10_000}, schema=schema), uri
                        ).initialize_mem_wal(unsharded=True)
    for g in range(20):  # 20 merges: 20 small fragments and deletion files, as a follower leaves them
        w = lance.dataset(uri).mem_wal_writer(SHARD, max_memtable_rows=1000, durable_write=False)
        w.put(pa.table({"id": [g * 300 + i for i in range(200)], "v": [g] * 200}, schema=schema))
        w.close()
        memwal.open(uri).merge()
    ds = lance.dataset(uri)
    for i in range(max(0, versions - ds.version)):
        ds.update_config({"bench.commit": str(i)})


def median_seconds(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(uri: str, runs: int) -> dict[str, Any]:
    import lance

    import memwal
    from memwal.table import open_table

    folder = Path(uri, "_versions")
    out: dict[str, Any] = {"versions": sum(1 for _ in folder.iterdir()),
                           "versions_bytes": sum(p.stat().st_size for p in folder.iterdir())}
    out["lance_open"] = median_seconds(lambda: lance.dataset(uri), runs)
    out["memwal_manifest"] = median_seconds(lambda: open_table(uri).manifest(), runs)
    out["memwal_scan"] = median_seconds(lambda: memwal.open(uri).scan(), runs)
    t0 = time.perf_counter()
    memwal.open(uri).gc(dry_run=True)  # the first plan reads every retained version's manifest
    out["gc_plan_cold"] = time.perf_counter() - t0
    memwal.open(uri).gc()  # a run: it leaves the digest of what it read (nothing expires: all are recent)
    out["gc_plan_warm"] = median_seconds(lambda: memwal.open(uri).gc(dry_run=True), runs)
    t0 = time.perf_counter()
    memwal.open(uri).gc(expire_versions=0, grace_seconds=0, writer_idle_seconds=0)  # the writer is gone
    out["gc_expiring_all_but_the_newest"] = time.perf_counter() - t0
    out["versions_after"] = sum(1 for _ in folder.iterdir())
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}


def at(points: list[tuple[int, float]], n: int) -> float:
    """The figure at ``n`` versions: interpolated between the measured counts, and past the largest
    extrapolated along the last segment's slope (the costs grow at least linearly: a listing)."""
    points = sorted(points)
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if n <= x1 or (x1, y1) == points[-1]:
            slope = (y1 - y0) / (x1 - x0) if x1 != x0 else 0.0
            return y0 + slope * (n - x0) if n >= x0 else y0 * n / max(x0, 1)
    return points[-1][1]


def simulate(measured: list[dict[str, Any]], per_minute: float) -> dict[str, Any]:
    figures = ("lance_open", "memwal_manifest", "memwal_scan", "gc_plan_cold", "gc_plan_warm", "versions_bytes")
    out: dict[str, Any] = {"per_minute": per_minute,
                           "how": "interpolated between the measured counts; past the largest, along the last "
                                  "segment's slope"}
    for name, seconds in RETENTIONS.items():
        kept = int(per_minute * seconds / 60) + 1
        out[name] = {"versions_retained": kept, **{f: round(at([(m["versions"], float(m[f])) for m in measured], kept),
                                                            4) for f in figures}}
    return out


def main(argv: list[str] | None = None) -> int:
    p = parser("read versions", __doc__, work=False)
    p.add_argument("--counts", default="1000,10000,40000")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--per-minute", type=float, default=40.0, help="versions a followed table commits a minute")
    args = p.parse_args(argv)
    from memwal.core.process import configure_process, quiet_lance

    configure_process()
    quiet_lance()
    with Run("versions_day", "what each retained version costs, read off a day of versions", out=args.out,
             runs=args.runs) as bench:
        measured = []
        for n in (int(c) for c in args.counts.split(",")):
            uri = str(bench.work / f"t{n}.lance")
            t0 = time.perf_counter()
            build(uri, n)
            bench.log(f"{n} versions written in {time.perf_counter() - t0:.0f}s")
            measured.append(measure(uri, args.runs))
            bench.log(f"{n} versions: {measured[-1]}")
            shutil.rmtree(uri, ignore_errors=True)
        bench.doc.update(measured=measured, day=simulate(measured, args.per_minute))
        bench.publish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
