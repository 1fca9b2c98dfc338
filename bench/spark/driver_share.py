"""The driver's share of a Spark merge's writes: ``python -m bench spark driver-share [--out DIR]``.

Issue 42: the driver's marked ``merge_insert`` wrote every upserted row again, so the driver
process wrote about as many bytes as the merge added to the table, and one machine bounded
every merge. For each size (``--sizes``, default 2M and 20M change rows; each table built once
per ``--work`` by :mod:`bench.data.tables`) and each commit path, on fresh copies, interleaved,
after one untimed run of each:

* ``driverless`` (the default for last-write-wins tables) and ``driver`` (the marked
  ``merge_insert`` on the driver, as before; the engine asked not to write the table): the
  whole ``memwal merge TABLE --engine spark --json`` (the CLI's own ``main``, in
  :func:`worker`), timed from exec to exit;
* bytes written, from ``/proc/<pid>/io``: ``write_bytes`` (bytes the process caused to be
  written to storage, counted as it dirties the page cache: the figure the share is made of)
  and ``wchar`` (every ``write``/``send``, sockets to the JVM and the Python workers included:
  an upper bound), of the driver's Python process and of the executors' processes (local mode:
  the JVM and the Python workers under the driver; on a cluster: every process under each
  worker daemon), sampled every 0.1 s while the merge runs and once at its end;
* data bytes added: the files the merge added under the table's ``data/`` and ``_deletions/``
  (its commit metadata, ``_versions/`` and ``_transactions/``, apart).

The tables' writers maintain the key index only (:func:`ensure_table`).

The driver share is the driver's ``write_bytes`` over the data bytes added. ``--cluster`` also
runs every size on a standalone cluster on 127.0.0.1 (a master and 2 workers of 1 core each,
``tests/sparkcluster.py``). Writes ``OUT/driver_share.json`` and ``OUT/driver_share.png``.
Goals (issue 42): driver share at most 5%; the whole merge no slower than the driver path.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness.processes import env, python
from bench.harness.results import Run, figure, log, parser

SIZES = (2_000_000, 20_000_000)
SMOKE_SIZES = (20_000,)
BASE_ROWS = 500_000
PATHS = ("driverless", "driver")
#: Runs of each path per size, interleaved: the machine is shared, so medians need several.
REPEATS = 5
#: Seconds between whole-process runs, not timed: a finished run's JVM takes a moment to exit.
PAUSE = 2.0
DRIVER_SHARE_MAX = 0.05


# --------------------------------------------------------------------------- /proc


def proc_io(pid: int) -> dict[str, int]:
    """``/proc/<pid>/io`` as numbers (empty when the process is gone or not ours)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f)}
    except (OSError, ValueError):
        return {}


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out.setdefault(ppid, []).append(int(entry))
    return out


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


class TreeIO:
    """What every process under some roots wrote while the block ran: the last
    ``/proc/<pid>/io`` seen, less what it had written when the block began (counters only grow,
    so the last sample of a process that exited is what it wrote, less its last 0.1 s)."""

    def __init__(self, roots: list[int], skip: int | None = None) -> None:
        self.roots, self.skip = roots, skip
        self.seen: dict[int, tuple[int, str, dict[str, int]]] = {}  # pid -> (root, comm, io)
        self.start: dict[int, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-io", daemon=True)

    def sample(self) -> None:
        children = _children()
        for root in self.roots:
            todo = list(children.get(root, [])) + ([root] if root != self.skip else [])
            while todo:
                pid = todo.pop()
                todo += children.get(pid, [])
                if pid == self.skip:
                    continue
                got = proc_io(pid)
                if got:
                    self.seen[pid] = (root, _comm(pid), got)

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            self.sample()

    def __enter__(self) -> TreeIO:
        self.sample()
        self.start = {pid: got for pid, (_root, _comm, got) in self.seen.items()}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def totals(self, key: str) -> dict[str, int]:
        """``key`` summed by role (``jvm``: Java processes; ``python``: Python workers)."""
        out = {"jvm": 0, "python": 0}
        for pid, (_root, comm, got) in self.seen.items():
            out["jvm" if comm == "java" else "python"] += got.get(key, 0) - self.start.get(pid, {}).get(key, 0)
        return out

    def by_root(self, key: str) -> list[int]:
        out = dict.fromkeys(self.roots, 0)
        for pid, (root, _comm, got) in self.seen.items():
            out[root] += got.get(key, 0) - self.start.get(pid, {}).get(key, 0)
        return list(out.values())


# --------------------------------------------------------------------------- the worker


def worker(table: str, path: str, result: str, watch: list[int]) -> int:
    """One merge as users run it (``memwal merge TABLE --engine spark --json``) with the io of
    this process and of the executors' processes, the engine's own timings and when each named
    step of the commits was reached. ``path=driver``: the engine is asked not to write the table
    (bench only: the core then takes the driver's marked merge_insert)."""
    from unittest import mock

    from memwal.spark.engine.merge import SparkMergeEngine

    from memwal.cli import main
    from memwal.core import steps

    engines: list[SparkMergeEngine] = []

    def engine(cls: type[SparkMergeEngine]) -> SparkMergeEngine:
        engines.append(cls(None, driverless=path == "driverless"))
        return engines[-1]

    marks: dict[str, float] = {}
    before = proc_io(os.getpid())
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(SparkMergeEngine, "from_active_or_local", classmethod(engine)))
        stack.enter_context(steps.hooked(lambda name: marks.setdefault(name, time.perf_counter() - t0)))
        executors = stack.enter_context(TreeIO(watch or [os.getpid()], skip=os.getpid()))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["merge", table, "--engine", "spark", "--json"])
        merge_seconds = time.perf_counter() - t0
    after = proc_io(os.getpid())
    doc = json.loads(out.getvalue()) if code == 0 else {}
    timings = engines[-1].last_timings if engines else {}
    first = marks.get("merge.before-data-commit", marks.get("merge.before-delete-commit",
                                                             marks.get("merge.before-marked-commit", 0.0)))
    with open(result, "w") as f:
        json.dump({
            "exit_code": code, "merge_seconds": merge_seconds, "commit_path": doc.get("commit_path"),
            "commits": doc.get("commits"), "version": doc.get("version"),
            "executors_wall_seconds": timings.get("executors_wall_seconds"), "shape": timings.get("shape"),
            "context_wait_seconds": timings.get("context_wait_seconds"),
            "commit_seconds": max(marks.get("merge.before-report", 0.0) - first, 0.0),
            "steps": marks,
            "driver": {k: after.get(k, 0) - before.get(k, 0) for k in ("write_bytes", "wchar", "syscw")},
            "executors": {"write_bytes": executors.totals("write_bytes"), "wchar": executors.totals("wchar"),
                          "write_bytes_by_worker": executors.by_root("write_bytes")},
        }, f)
    return code


# --------------------------------------------------------------------------- the harness


def _files(path: str) -> dict[str, int]:
    out = {}
    for root, _dirs, files in os.walk(path):
        for name in files:
            p = os.path.join(root, name)
            with contextlib.suppress(OSError):
                out[os.path.relpath(p, path)] = os.path.getsize(p)
    return out


def ensure_table(work: Path, change_rows: int, base_rows: int) -> tuple[str, dict]:
    from bench.data.tables import TableSpec, cached_table

    # The writers maintain the key index only: an HNSW graph in every MemTable would make the
    # 20M-row table take hours to write, and no merge path reads or writes the vector index.
    log(f"the table with {change_rows:,} change rows over {base_rows:,} base rows (built once per --work)", "spark")
    spec = TableSpec(base_rows=base_rows, change_rows=change_rows, maintain_vector_index=False)
    return cached_table(work, f"table-{change_rows}-{base_rows}-id-maintained", spec)


def one_run(pristine: str, copy: Path, path: str, env: dict, watch: list[int], logs: Path) -> dict:
    from bench.data.tables import copy_table

    copy_table(pristine, copy, sync=True)  # the copy's own writeback is not the merge's
    before = _files(str(copy))
    result = logs / f"{copy.name}-{path}.json"
    result.unlink(missing_ok=True)
    load = os.getloadavg()[0]
    proc = python("-m", "bench.spark.driver_share", "worker", str(copy), "--path", path, "--result", str(result),
                  *[a for pid in watch for a in ("--watch", str(pid))], env=env)
    whole = proc.seconds
    if proc.rc != 0 or not result.exists():
        raise RuntimeError(f"merge on the {path} path exited {proc.rc}:\n{proc.error(3000)}")
    doc = json.loads(result.read_text())
    after = _files(str(copy))
    added = {k: v for k, v in after.items() if k not in before}
    data = sum(v for k, v in added.items() if k.startswith(("data/", "_deletions/")))
    meta = sum(v for k, v in added.items() if k.startswith(("_versions/", "_transactions/")))
    executors = sum(doc["executors"]["write_bytes"].values())
    return {**doc, "whole_seconds": round(whole, 3), "data_bytes_added": data, "metadata_bytes_added": meta,
            "load_average_before": round(load, 2), "load_average_after": round(os.getloadavg()[0], 2),
            "driver_share": doc["driver"]["write_bytes"] / data if data else None,
            "driver_share_wchar": doc["driver"]["wchar"] / data if data else None,
            "executors_share": executors / data if data else None}


def _state(path: str) -> tuple:
    from bench.merge.compare import table_state  # not in the worker: it times its own imports

    return table_state(path)


def one_size(work: Path, change_rows: int, base_rows: int, env: dict, watch: list[int], repeats: int) -> dict:
    pristine, info = ensure_table(work, change_rows, base_rows)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    copies = {p: work / f"copy-{change_rows}-{p}" for p in PATHS}
    for p in PATHS:  # untimed: each path's code and Spark's jars warm
        log(f"{change_rows:,}: {p} (warm-up)")
        one_run(pristine, copies[p], p, env, watch, logs)
    runs: dict[str, list[dict]] = {p: [] for p in PATHS}
    for i in range(repeats):  # interleaved, each on a fresh copy
        for p in PATHS:
            time.sleep(PAUSE)
            log(f"{change_rows:,}: {p} ({i + 1}/{repeats})")
            runs[p].append(one_run(pristine, copies[p], p, env, watch, logs))
    point: dict = {"change_rows": info["change_rows"], "base_rows": info["base_rows"],
                   "generations": info["generations"], "table_bytes": info["bytes"]}
    for p, done in runs.items():
        point[p] = {
            "whole_seconds": statistics.median(r["whole_seconds"] for r in done),
            "whole_seconds_min": min(r["whole_seconds"] for r in done),
            "merge_seconds": statistics.median(r["merge_seconds"] for r in done),
            "executors_wall_seconds": statistics.median(r["executors_wall_seconds"] for r in done),
            "commit_seconds": statistics.median(r["commit_seconds"] for r in done),
            "shape": done[-1]["shape"],
            "driver_share": statistics.median(r["driver_share"] for r in done),
            "driver_share_wchar": statistics.median(r["driver_share_wchar"] for r in done),
            "executors_share": statistics.median(r["executors_share"] for r in done),
            "data_bytes_added": statistics.median(r["data_bytes_added"] for r in done),
            "metadata_bytes_added": statistics.median(r["metadata_bytes_added"] for r in done),
            "commit_path": done[-1]["commit_path"],
            "runs": done,
        }
    a, b = (_state(str(copies[p])) for p in PATHS)
    point["identical"] = a[0].equals(b[0]) and a[1] == b[1]
    point["driverless_over_driver_seconds"] = round(point["driverless"]["whole_seconds"] /
                                                    point["driver"]["whole_seconds"], 3)
    point["driverless_over_driver_seconds_min"] = round(point["driverless"]["whole_seconds_min"] /
                                                        point["driver"]["whole_seconds_min"], 3)
    for c in copies.values():
        shutil.rmtree(c, ignore_errors=True)
    return point


def run(out: str | Path = "bench-results", *, sizes: tuple[int, ...] = SIZES, base_rows: int = BASE_ROWS,
        repeats: int = REPEATS, cluster: bool = False, work: str | Path | None = None, smoke: bool = False) -> dict:
    # absolute: a cluster's executors run in folders of their own
    out, work = Path(out).resolve(), Path(work or Path(out) / "driver-share-work").resolve()
    bench = Run("driver_share", "the driver's share of a Spark merge's writes", out=out, work=work,
                mode="smoke" if smoke else "full", measure="write_bytes",
                goals={"driver_share_max": DRIVER_SHARE_MAX, "driverless_over_driver_seconds_max": 1.0})
    doc = bench.doc
    doc["local"] = {"master": os.environ.get("MEMWAL_SPARK_MASTER", "local[2]"),
                    "points": [one_size(work, n, base_rows, env(), [], repeats) for n in sizes]}
    if cluster:
        bench.publish()  # kept if the cluster part fails
        from tests.sparkcluster import standalone_cluster

        pids: list[int] = []
        shutil.rmtree(work / "cluster", ignore_errors=True)
        (work / "cluster").mkdir(parents=True)
        with standalone_cluster(work / "cluster", workers=2, cores=1, memory="3g", pids=pids) as (url, _ui, _w):
            doc["cluster"] = {"master": url, "workers": 2, "cores_per_worker": 1,
                              "points": [one_size(work, n, base_rows, env(master=url), pids, repeats) for n in sizes]}
    points = doc["local"]["points"] + doc.get("cluster", {}).get("points", [])
    doc["goals"]["met"] = all(p["driverless"]["driver_share"] <= DRIVER_SHARE_MAX
                              and p["driverless_over_driver_seconds"] <= 1.0 for p in points)
    doc["identical"] = all(p["identical"] for p in points)
    bench.publish(draw=chart, summary=summary)
    return doc


def summary(doc: dict[str, Any]) -> str:
    lines = []
    for where in ("local", "cluster"):
        for pt in doc.get(where, {}).get("points", []):
            d, r = pt["driverless"], pt["driver"]
            lines.append(f"{where} {pt['change_rows']:>11,} rows: driver share {100 * d['driver_share']:.2f}% "
                         f"(driver path {100 * r['driver_share']:.1f}%), executors {100 * d['executors_share']:.0f}%, "
                         f"whole {d['whole_seconds']}s vs {r['whole_seconds']}s "
                         f"({pt['driverless_over_driver_seconds']}x), identical {pt['identical']}")
    return "\n".join(lines)


def chart(doc: dict, path: Path) -> None:
    series = [("local", p) for p in doc["local"]["points"]] + [("cluster", p) for p in doc.get("cluster", {})
                                                                 .get("points", [])]
    labels = [f"{where}\n{p['change_rows'] / 1e6:.1f}M rows" for where, p in series]
    x = range(len(series))
    with figure(path, rows=1, cols=2, size=(11, 4)) as (fig, (left, right)):
        for i, p in enumerate(PATHS):
            off = [v + (i - 0.5) * 0.38 for v in x]
            left.bar(off, [100 * s[p]["driver_share"] for _, s in series], 0.38, label=p)
            right.bar(off, [s[p]["whole_seconds"] for _, s in series], 0.38, label=p)
        left.axhline(100 * DRIVER_SHARE_MAX, color="grey", linestyle="--", linewidth=1, label="goal (5%)")
        left.set_ylabel("driver's bytes written / data bytes added (%)")
        right.set_ylabel("whole memwal merge --engine spark (s, median)")
        for ax in (left, right):
            ax.set_xticks(list(x), labels)
            ax.legend()
        fig.suptitle("Spark merge: what the driver writes, driverless against the driver's merge_insert")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        w = argparse.ArgumentParser(prog="python -m bench.spark.driver_share worker")
        w.add_argument("table")
        w.add_argument("--path", choices=PATHS, required=True)
        w.add_argument("--result", required=True)
        w.add_argument("--watch", type=int, action="append", default=[], help="a root of the executors' processes")
        a = w.parse_args(argv[1:])
        return worker(a.table, a.path, a.result, a.watch)
    p = parser("spark driver-share", __doc__, smoke=True)
    p.add_argument("--sizes", help="change rows, comma-separated (default 2000000,20000000)")
    p.add_argument("--base-rows", type=int, default=BASE_ROWS)
    p.add_argument("--repeats", type=int, default=REPEATS)
    p.add_argument("--cluster", action="store_true", help="also on a standalone cluster (master + 2 workers)")
    args = p.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else (SMOKE_SIZES if args.smoke else SIZES)
    run(args.out or "bench-results", sizes=sizes, base_rows=20_000 if args.smoke else args.base_rows,
        repeats=1 if args.smoke else args.repeats, cluster=args.cluster, work=args.work, smoke=args.smoke)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
