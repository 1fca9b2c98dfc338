"""GC benchmark: collect 10,000 merged generations, timed.

Usage::

    .venv/bin/python -m bench gc many --work /tmp/gc-bench [--generations 10000] [--shards 4] [--runs 3]

The table (:mod:`bench.data.forged`: one real generation per shard, copied as generations
``2..N``) is built once and cached in ``<work>/pristine-<N>x<shards>``. Each run copies the
pristine table (``cp -a``: real files, not links; then ``sync``, as generations are long
written when GC runs), takes a GC lease as the CLI does, then times ``prepare_gc`` (plan) and
``run_gc(table, plan)`` (execute) and checks that every generation and WAL entry went. Wall
and CPU seconds are reported: on a shared machine CPU time is the steadier measure of the
code's own cost, wall time on a disk is bounded below by the file system (``--floor`` times a
plain ``rm -rf`` and threaded unlinks of the same files, interleaved with the GC runs).
Nothing is asserted about time.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.data.forged import build
from bench.data.tables import copy_table
from bench.harness.results import Run, parser


def one_run(pristine: Path, work: Path, i: int, threads: int | None = None) -> dict[str, Any]:
    """Copy the pristine table, then plan and execute GC under a lease; returns timings
    (``threads``: the trees deleted on that many threads, not ``DELETE_THREADS``)."""
    from memwal.gc import prepare_gc, run_gc
    from memwal.lease import Lease
    from memwal.table import open_table
    from memwal.table.shards import list_generation_dirs, list_shard_ids, list_wal_entries

    run_dir = work / f"run-{i}"
    copy_table(str(pristine), run_dir, preserve=True, sync=True)  # GC's deletes never wait behind a write-back
    table = open_table(str(run_dir))
    import memwal.gc.delete

    default = memwal.gc.delete.DELETE_THREADS
    memwal.gc.delete.DELETE_THREADS = threads or default
    c0, t0 = time.process_time(), time.perf_counter()
    # every version before the marker expires (as in the object-store bench): only the gates stand
    plan = prepare_gc(table, grace_seconds=0, writer_idle_seconds=0, expire_versions_seconds=0)
    c1, t1 = time.process_time(), time.perf_counter()
    with Lease(table.store, "gc", ttl_seconds=300) as lease:
        c2, t2 = time.process_time(), time.perf_counter()
        result = run_gc(table, plan, lease=lease)
        c3, t3 = time.process_time(), time.perf_counter()
    memwal.gc.delete.DELETE_THREADS = default
    left = sum(len(list_generation_dirs(table.store, s)) + len(list_wal_entries(table.store, s))
               for s in list_shard_ids(table.store))
    shutil.rmtree(run_dir, ignore_errors=True)
    return {"plan_s": round(t1 - t0, 3), "execute_s": round(t3 - t2, 3), "total_s": round(t1 - t0 + t3 - t2, 3),
            # CPU seconds of this process (all threads): steadier than wall time on a shared machine
            "cpu_s": round(c1 - c0 + c3 - c2, 3),
            "generations_deleted": len(result.deleted), "wal_entries_deleted": result.wal_entries_deleted,
            "objects_deleted": result.objects_deleted, "objects_left": left,
            "delete_threads": threads or default}


def _doomed(run_dir: Path) -> list[str]:
    """What GC deletes: every generation directory and every WAL folder of every shard."""
    from memwal.table.naming import MEM_WAL_DIR

    return [str(d) for shard in Path(run_dir, MEM_WAL_DIR).iterdir() if shard.is_dir() for d in shard.iterdir()
            if "_gen_" in d.name or d.name == "wal"]


def floor_run(pristine: Path, work: Path) -> float:
    """Seconds a plain ``rm -rf`` of the same generation directories and WAL entries takes on
    this disk: no check, no lease, no manifest order, one thread. GC deletes from several
    threads (the file system's journal is shared by concurrent unlinks), so it can beat it."""
    run_dir = work / "floor"
    copy_table(str(pristine), run_dir, preserve=True, sync=True)
    doomed = _doomed(run_dir)
    t0 = time.perf_counter()
    subprocess.run(["rm", "-rf", *doomed], check=True)
    took = time.perf_counter() - t0
    shutil.rmtree(run_dir, ignore_errors=True)
    return round(took, 3)


def threaded_floor_run(pristine: Path, work: Path, threads: int) -> dict[str, float]:
    """The same files unlinked by ``threads`` threads with no check at all: one walk, then the
    files in ``threads`` slices at once, then the directories deepest first, each depth's in
    slices at once. What a multi-threaded ``rm -rf`` costs on this disk (GC deletes with
    ``memwal.gc.delete.DELETE_THREADS`` threads, with its checks)."""
    from concurrent.futures import ThreadPoolExecutor

    run_dir = work / f"floor-{threads}"
    copy_table(str(pristine), run_dir, preserve=True, sync=True)
    doomed = _doomed(run_dir)
    t0 = time.perf_counter()
    files: list[str] = []
    dirs: list[tuple[int, str]] = []
    for top in doomed:
        for root, _dirs, fnames in os.walk(top):
            files += [os.path.join(root, f) for f in fnames]
            dirs.append((root.count("/"), root))
    t1 = time.perf_counter()

    def unlink(paths: list[str]) -> None:
        for f in paths:
            os.unlink(f)

    def rmdir(paths: list[str]) -> None:
        for d in paths:
            os.rmdir(d)

    def spread(fn, items: list[str], pool) -> None:
        step = max(1, -(-len(items) // threads))
        list(pool.map(fn, [items[i:i + step] for i in range(0, len(items), step)]))

    with ThreadPoolExecutor(threads) as pool:
        spread(unlink, files, pool)
        t2 = time.perf_counter()
        for depth in sorted({d for d, _ in dirs}, reverse=True):
            spread(rmdir, [p for d, p in dirs if d == depth], pool)
    t3 = time.perf_counter()
    shutil.rmtree(run_dir, ignore_errors=True)
    return {"threads": threads, "total_s": round(t3 - t0, 3), "walk_s": round(t1 - t0, 3),
            "unlink_s": round(t2 - t1, 3), "rmdir_s": round(t3 - t2, 3), "files": len(files), "dirs": len(dirs)}


def filesystem(path: Path) -> dict[str, Any]:
    """The file system the runs delete on, from ``/proc/mounts``: type, device and options, and
    for ext4 whether it keeps a journal. It decides the figure more than any code: ext4 without
    a journal and mounted with ``discard`` frees each file's blocks with a discard request it
    waits for inside ``unlink`` (seen in ``perf``: ``ext4_free_blocks`` ->
    ``blkdev_issue_discard`` -> ``submit_bio_wait``), so every deletion, ours and ``rm -rf``,
    waits on the host's disk; with a journal, discards are issued at the journal's commit."""
    real = os.path.realpath(path)
    best: list[str] = []  # the mount holding ``real`` with the longest mount point
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            mounts = [line.split()[:4] for line in f]
    except OSError:
        return {}
    for device, point, kind, options in mounts:
        point = point.replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (not best or len(point) > len(best[1])):
            best = [device, point, kind, options]
    if not best:
        return {}
    device, point, kind, options = best
    facts: dict[str, Any] = {"type": kind, "device": device, "mount_point": point, "options": options.split(",")}
    facts["online_discard"] = "discard" in facts["options"]
    if kind == "ext4":
        try:
            task = Path("/sys/fs/ext4", os.path.basename(device), "journal_task").read_text().strip()
            facts["journal"] = task != "<none>"
        except OSError:
            pass
    return facts


def timers_run(pristine: Path, work: Path) -> dict[str, Any]:
    """One more GC run (plan and execute) with :mod:`bench.harness.timers` around the core's functions."""
    from bench.harness.timers import GC_RUN, Timers, preload

    preload(GC_RUN)
    timers = Timers(GC_RUN).install()
    doc = one_run(pristine, work, 99)
    return {**doc, **timers.report()}


def main(argv: list[str] | None = None) -> int:
    p = parser("gc many", __doc__)
    p.add_argument("--generations", type=int, default=10_000)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--rebuild", action="store_true")
    p.add_argument("--floor", action="store_true", help="also time a plain rm -rf of the same files, and "
                   "unlinks of them by 1, 4 and 8 threads (interleaved with the GC runs)")
    p.add_argument("--timers", action="store_true", help="one more GC run under bench.harness.timers: seconds per "
                   "function")
    p.add_argument("--threads", help="also GC with the trees deleted on these thread counts (comma-separated, "
                   "interleaved with the runs): docs/decisions/0002-delete-threads.md")
    args = p.parse_args(argv)
    import memwal

    with Run("gc_many", "GC of many merged generations, against rm -rf", out=args.out, work=args.work,
             memwal=str(Path(memwal.__file__).parent), generations=args.generations, shards=args.shards) as bench:
        work = bench.work
        pristine = work / f"pristine-{args.generations}x{args.shards}"
        built = None
        if args.rebuild or not pristine.exists():
            shutil.rmtree(pristine, ignore_errors=True)
            pristine.parent.mkdir(parents=True, exist_ok=True)
            built = round(build(str(pristine), args.generations, args.shards), 1)
        runs, rm_rf, threaded = [], [], []
        fixed: dict[int, list[dict[str, Any]]] = {int(n): [] for n in (args.threads or "").split(",") if n}
        for i in range(args.runs):  # interleaved: GC, then the baselines, on fresh copies each
            runs.append(one_run(pristine, work, i))
            for n in fixed:
                fixed[n].append(one_run(pristine, work, i, threads=n))
            if args.floor:
                rm_rf.append(floor_run(pristine, work))
                threaded.append([threaded_floor_run(pristine, work, n) for n in (1, 4, 8)])
        doc = bench.doc
        doc.update({"build_s": built, "filesystem": filesystem(work), "runs": runs,
                    "rm_rf_floor_s": statistics.median(rm_rf) if rm_rf else None, "rm_rf_runs": rm_rf,
                    "threaded_unlink_runs": threaded,
                    "median_total_s": statistics.median(r["total_s"] for r in runs) if runs else None})
        if threaded:
            doc["threaded_unlink_median_s"] = {str(t["threads"]): statistics.median(
                run[j]["total_s"] for run in threaded) for j, t in enumerate(threaded[0])}
            best = min(doc["threaded_unlink_median_s"].values())
            doc["gc_over_rm_rf"] = round(doc["median_total_s"] / doc["rm_rf_floor_s"], 2)
            doc["gc_over_best_threaded_unlink"] = round(doc["median_total_s"] / best, 2)
        if fixed:
            doc["thread_runs"] = {str(n): r for n, r in fixed.items()}
            doc["threads_median_total_s"] = {str(n): statistics.median(x["total_s"] for x in r)
                                             for n, r in fixed.items()}
        if args.timers:
            doc["timers"] = timers_run(pristine, work)
        bench.publish(summary=summary)
    return 0


def summary(doc: dict[str, Any]) -> str:
    line = f"GC of {doc['generations']:,} generations: {doc['median_total_s']}s median"
    if doc.get("rm_rf_floor_s"):
        line += f", rm -rf {doc['rm_rf_floor_s']}s ({doc['gc_over_rm_rf']}x)"
    return line


if __name__ == "__main__":
    sys.exit(main())
