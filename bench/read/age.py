"""Age: what each recurring job costs as a followed table ages on the default retention (issue 82).

Usage::

    .venv/bin/python -m bench read age [--ages 300,1000,3000] [--rounds 10] [--out DIR]

A writer that never stops beside ``memwal cycle --follow`` makes the table commit a version per
flush (some 35 a minute, 50,000 a day), and the default 7-day retention keeps them all, with the
merged generation folders, WAL entries and shard manifest versions they still need. A job whose
cost follows what the table kept, not the work since its last run, slows as the table ages.

The table is aged in-process as the follower's jobs would age it, one flush at a time: pylance's
``ShardWriter`` flushes 60 rows (``max_memtable_rows=60``), then a merge; a listing pass every 3
flushes; a compaction every 8 (the follower's tail pass keeps the base's fragments as few); a
whole GC (default retention: it expires nothing) and a catch-up every 100. At each of
``--ages`` (flushes) the table is copied and, in a new process each (its digest written by a
whole GC first, as the follower's keep it written), measured by process CPU
seconds (Lance's threads included): a follower's per-flush work (a flush, its merge and a listing
pass; ``--rounds`` of them after 3 of warm-up, the mean), ``gc --dry-run``, ``status`` and a new
reader's ``memwal.open(uri).scan()`` (each the second of two, the first warming the process), and
beside them Lance's own ``lance.dataset()`` open and ``versions()``, which grow with the versions
whatever memwal does; also the files and bytes under ``_mem_wal/_jobs/`` (memwal's own records).

Going further than a bench can: age once with ``--work DIR`` (the oldest copy is kept, as
``DIR/aged/age-N``), then start the next run from it (``--from DIR/aged/age-N``): its ages count
the flushes since.
JSON to stdout and ``--out``, with a chart there of each cost against age and against its young value
(``OUT/age.png``); the figures and their spread are in docs/benchmarks/reads.md.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness import processes
from bench.harness.results import Run, parser

PK = {"lance-schema:unenforced-primary-key": "true"}

#: One measurement, run as ``python -c`` in a new process: prints a JSON object of CPU seconds.
MEASURE = r"""
import json, os, shutil, sys, time, logging
import lance, numpy as np, pyarrow as pa
logging.disable(logging.WARNING)
import memwal
src, scratch, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])

def fresh():
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(src, scratch, symlinks=True)
    return scratch

def cpu(fn, n=1):
    t0 = time.process_time()
    for i in range(n):
        fn(i)
    return (time.process_time() - t0) / n

out = {}
uri = fresh()
ds = lance.dataset(uri)
shard = [d for d in os.listdir(uri + "/_mem_wal") if not d.startswith("_")][0]
writer = ds.mem_wal_writer(shard, max_memtable_rows=60, durable_write=False)
table = memwal.open(uri)
rng = np.random.default_rng(7)

def flush(i):
    k = rng.choice(20_000, 60, replace=False).astype(np.int64)
    writer.put(pa.table(dict(zip(ds.schema.names, (k, k * 0 - i))), schema=ds.schema))
    assert table.merge().ok
    table.gc(listed_only=True)


# The clock of a follower that has run past the reader grace period since these flushes: its
# whole GC has pruned the shard-manifest versions older than that, as the aging, faster than the
# grace period, could not (6,690 versions listed at every flush otherwise).
class Later:
    def __call__(self):
        return time.time() + 660.0
    def wait_until(self, deadline, stop):
        return stop.wait(max(0.0, deadline - self()))

from memwal.core import clock as clocks

def past_grace(uri):
    with clocks.use(Later()):
        memwal.open(uri).gc()

past_grace(uri)
cpu(flush, 3)
out["flush_cpu"] = cpu(flush, rounds)
uri = fresh()
# a copy's files are new to the retained-progress digest (its keys name the files): a whole GC,
# as a follower's every minute, writes it for this copy (past the grace period, as above)
past_grace(uri)
for name, fn in (("gc_dry_run_cpu", lambda i: memwal.open(uri).gc(dry_run=True)),
                 ("status_cpu", lambda i: memwal.open(uri).status()),
                 ("scan_cpu", lambda i: memwal.open(uri).scan()),
                 ("lance_open_cpu", lambda i: lance.dataset(uri)),
                 ("lance_versions_cpu", lambda i: lance.dataset(uri).versions())):
    fn(0)
    out[name] = cpu(fn)
shutil.rmtree(scratch, ignore_errors=True)
print(json.dumps(out))
"""


def age(uri: str, ages: list[int], keep: Path, log: Any, start: str | None = None) -> dict[int, float]:
    """Age the table at ``uri`` flush by flush (see the module docstring), copying it to
    ``keep/age-N`` at each of ``ages``; the seconds it took to reach each."""
    import lance
    import numpy as np
    import pyarrow as pa

    import memwal

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK), pa.field("v", pa.int64())])
    if start:
        shutil.copytree(start, uri, symlinks=True)
        shard = next(d for d in os.listdir(f"{uri}/_mem_wal") if not d.startswith("_"))
        schema = lance.dataset(uri).schema  # an aged table's own (a bench before may have named them otherwise)
    else:
        ids = np.arange(10_000, dtype=np.int64)
        lance.write_dataset(pa.table({"id": ids, "v": ids}, schema=schema), uri)
        lance.dataset(uri).create_scalar_index("id", "BTREE")
        lance.dataset(uri).initialize_mem_wal(bucket_column="id", num_buckets=1, maintained_indexes=["id_idx"])
        shard = str(uuid.uuid4())
    writer = lance.dataset(uri).mem_wal_writer(shard, max_memtable_rows=60, durable_write=False)
    table = memwal.open(uri)
    rng = np.random.default_rng(1)
    reached: dict[int, float] = {}
    t0 = time.perf_counter()
    for i in range(1, max(ages) + 1):
        k = rng.choice(20_000, 60, replace=False).astype(np.int64)
        writer.put(pa.table(dict(zip(schema.names, (k, k * 0 + i), strict=True)), schema=schema))
        if not table.merge().ok:
            raise processes.BenchFailed(f"merge failed at flush {i}")
        if i % 3 == 0:
            table.gc(listed_only=True)
        if i % 8 == 0:  # as the follower's tail pass keeps the base's fragments few (--compact-fragments 8)
            table.compact()
        if i % 100 == 0:
            table.gc()
            table.catchup()
        if i in ages:
            shutil.copytree(uri, keep / f"age-{i}", symlinks=True)
            reached[i] = time.perf_counter() - t0
            log(f"{i} flushes, table version {lance.dataset(uri).version}, {reached[i]:.0f}s")
    writer.close()
    return reached


#: The costs the chart draws: memwal's (the goal: within 1.5x its young value plus Lance's own growth) and Lance's.
CHARTED = {"flush_cpu": "a flush, its merge and listing pass", "gc_dry_run_cpu": "gc --dry-run",
           "status_cpu": "status", "scan_cpu": "a new reader's scan", "lance_open_cpu": "Lance: lance.dataset()",
           "lance_versions_cpu": "Lance: versions()"}


def chart(doc: dict[str, Any], path: Path) -> None:
    """Each cost against the table's age (flushes), and its ratio to the youngest age's."""
    from bench.harness.results import figure

    points = doc["points"]
    ages = [p["flushes"] for p in points]
    with figure(path, rows=1, cols=2, size=(13, 4.8)) as (_, axes):
        for key, label in CHARTED.items():
            style = "--" if key.startswith("lance_") else "-"
            axes[0].plot(ages, [p[key] * 1000 for p in points], style, marker="o", label=label)
            if points[0][key]:
                axes[1].plot(ages, [p[key] / points[0][key] for p in points], style, marker="o", label=label)
        axes[0].set_ylabel("CPU ms (process time, Lance's threads included)")
        axes[0].set_yscale("log")
        axes[1].axhline(1.5, color="black", linewidth=1, linestyle=":", label="1.5x")
        axes[1].set_ylabel(f"x its cost at {ages[0]:,} flushes")
        axes[1].set_yscale("log")
        from matplotlib.ticker import FuncFormatter, NullFormatter

        plain = FuncFormatter(lambda v, _: f"{v:,.6g}")
        axes[1].yaxis.set_major_formatter(plain)
        axes[1].yaxis.set_minor_formatter(plain)
        for ax in axes:
            ax.set_xscale("log")
            ax.set_xticks(ages, [f"{a:,}" for a in ages])  # the ages measured, no other labels
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("flushes (a table version each, the default retention keeps them all)")
            ax.legend(fontsize=7)
        axes[0].set_title("each recurring cost as a followed table ages", fontsize=9)
        axes[1].set_title("against its young value (memwal's goal: 1.5x plus Lance's own growth)", fontsize=9)


def jobs_folder(uri: str) -> dict[str, int]:
    """Files and bytes under ``_mem_wal/_jobs/`` (memwal's own records)."""
    files = size = 0
    for root, _, names in os.walk(Path(uri, "_mem_wal", "_jobs")):
        for n in names:
            files += 1
            size += os.path.getsize(os.path.join(root, n))
    return {"jobs_files": files, "jobs_bytes": size}


def main(argv: list[str] | None = None) -> int:
    p = parser("read age", __doc__, smoke=True)
    p.add_argument("--ages", default="300,1000,3000", help="flushes at which the table is measured")
    p.add_argument("--rounds", type=int, default=10, help="flushes measured per age (after 3 of warm-up)")
    p.add_argument("--from", dest="start", default=None, help="an aged table to start from (see the docstring)")
    args = p.parse_args(argv)
    ages = [20, 60] if args.smoke else sorted(int(a) for a in args.ages.split(","))
    rounds = 2 if args.smoke else args.rounds
    from memwal.core.process import configure_process, quiet_lance

    configure_process()
    quiet_lance()
    with Run("age", "each recurring job's cost as a followed table ages", out=args.out, work=args.work,
             ages=ages, rounds=rounds) as bench:
        keep = bench.work / "aged"
        keep.mkdir(parents=True, exist_ok=True)
        reached = age(str(bench.work / "t"), ages, keep, bench.log, args.start)
        points = []
        for n in ages:
            aged = str(keep / f"age-{n}")
            proc = processes.python("-c", MEASURE, aged, str(bench.work / "scratch"), str(rounds)).check()
            point = {"flushes": n, "seconds_to_reach": round(reached[n], 1),
                     **{k: round(v, 4) for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()},
                     **jobs_folder(aged)}
            bench.log(json.dumps(point))
            points.append(point)
            if n != ages[-1]:
                shutil.rmtree(aged, ignore_errors=True)
        young = points[0]
        bench.doc.update(points=points, growth={
            k: round(points[-1][k] / young[k], 2) for k in young if k.endswith("_cpu") and young[k]})
        bench.publish(draw=chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
