"""Spark Connect against classic, Spark against local, and what the driver writes: ``python -m bench spark connect``.

Issue 63's figures, whole processes side by side, interleaved, each on a fresh copy of one table
(``--change-rows``, default 2M asked, built once per ``--work`` by
:func:`bench.spark_breakdown.ensure_table`, the table ``bench.spark_timeline`` measures), after
one untimed run of each arm:

* ``local``: ``memwal merge COPY --engine local --json``;
* ``classic``: ``memwal merge COPY --engine spark --json``, a local context started by the
  process (``local[2]``, its JVM's start-up included, the class archive when built);
* ``connect``: the same with ``SPARK_REMOTE`` pointing at a Spark Connect server on loopback,
  started once by the bench from PySpark's own jars (``local[2]``, the driver memory a local
  context gets): a cluster that is up, as users reach one. The client has no Java on its PATH;
* ``ray`` (``--arms local,classic,ray,ray-cluster``; issue 85): ``memwal merge COPY --engine ray
  --json``, a local Ray of the machine's cores started by the process (its start-up and shutdown
  included);
* ``ray-cluster``: the same with ``RAY_ADDRESS`` at a one-node Ray cluster on loopback of the
  machine's cores (``ray start --head``, started once by the bench, tests/raycluster.py): a
  cluster that is up, as ``connect`` measures Spark's.

Each run is the CLI's own ``main`` in a worker process (:func:`worker`), timed by the harness from
exec to exit. The worker records, over the merge:

* its own ``/proc/<pid>/io`` (``write_bytes``: bytes the process caused to be written to
  storage, counted as it dirties the page cache; ``wchar`` and ``syscw``: its write calls;
  ``cancelled_write_bytes``): the driver's share is ``write_bytes`` over the data files the merge
  added under ``data/`` and ``_deletions/`` (goal: at most 5%, on both kinds of session);
* the engine's own timings (waiting for the session, the executors' wall time, task seconds
  by phase) and when each named step of the commits was reached: where the time went.

What the driver's ``write_bytes`` holds (issue 63, measured on this machine's ext4, which has no
journal and is mounted ``relatime``): the pages it dirties, charged a page (4 KiB) at a time. Its
own files (leases, intent, run record, the two commits' manifests and transactions) are about
50 pages. The rest, about 1.1 MB on this table, is no write of ours: reading a file whose access
time is older than its last change (every generation file a writer just flushed) updates that
access time, and without a journal the kernel charges the dirtied inode-table block to the
reader. The merge plan opens every unmerged generation's manifest and validates its data and
deletion files (docs/decisions/0020), so the driver pays one inode block per block of files it
reads first. ``--pre-read`` reads every file of the copy before the run: the difference is that
share. A journaled ext4 (the default) charges metadata to its journal thread, a ``noatime`` or
``lazytime`` mount writes none, and object stores have no access time.

``--baseline REV`` adds an arm ``classic@REV``: the Spark engine of an earlier revision (its
``memwal/`` and ``jobs/`` from git, first on the workers' path), interleaved with the others, to
find where time went between revisions.

Goals: ``connect`` within 1.5x ``classic``; ``classic`` within 3x ``local``; ``ray`` within 2x
``local``. The machine's load average is recorded before and after every run: on a shared
machine the figures are only as good as that. Writes ``OUT/spark_connect.json`` and ``OUT/spark_connect.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness.processes import ROOT  # the repository (git archive of a baseline, the arms' cwd)

ARMS = ("local", "classic", "connect")
REPEATS = 3
#: Seconds between whole-process runs, not timed: a finished run's JVM takes a moment to exit.
PAUSE = 2.0
DRIVER_SHARE_MAX = 0.05
CONNECT_OVER_CLASSIC_MAX = 1.5
SPARK_OVER_LOCAL_MAX = 3.0
RAY_OVER_LOCAL_MAX = 2.0
IO_KEYS = ("write_bytes", "wchar", "syscw", "cancelled_write_bytes", "read_bytes")
NOISE = "Index __lance_mem_wal has no fields"


def log(msg: str) -> None:
    print(f"[spark-connect {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def proc_io(pid: int) -> dict[str, int]:
    try:
        with open(f"/proc/{pid}/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f)}
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------------- the worker


def worker(table: str, engine: str, result: str) -> int:
    """One merge as users run it, its driver's io and the engine's timings in ``result``."""
    from unittest import mock

    from memwal.cli import main
    from memwal.core import steps
    from memwal.tasks.merge_job import TaskMergeEngine

    engines: list[TaskMergeEngine] = []
    real = TaskMergeEngine._collect

    def keep(self: TaskMergeEngine, *args: Any, **kwargs: Any) -> Any:
        engines.append(self)
        return real(self, *args, **kwargs)

    marks: dict[str, float] = {}
    before = proc_io(os.getpid())
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(TaskMergeEngine, "_collect", keep))
        stack.enter_context(steps.hooked(lambda name: marks.setdefault(name, time.perf_counter() - t0)))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["merge", table, "--engine", engine, "--json"])
    merge_seconds = time.perf_counter() - t0
    after = proc_io(os.getpid())
    doc = json.loads(out.getvalue()) if code == 0 else {}
    with open(result, "w") as f:
        json.dump({"exit_code": code, "merge_seconds": merge_seconds, "commit_path": doc.get("commit_path"),
                   "version": doc.get("version"), "steps": marks,
                   "timings": engines[-1].last_timings if engines else {},
                   "driver_io": {k: after.get(k, 0) - before.get(k, 0) for k in IO_KEYS}}, f)
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


def arm_env(arm: str, url: str, trees: dict[str, Path] | None = None,
            ray: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of an arm's worker: no Java and ``SPARK_REMOTE`` for ``connect``; the
    cluster's address and token (``ray``) for ``ray-cluster``; for ``classic@REV``, the memwal of
    that revision first on the path (:func:`baseline_tree`)."""
    from tests.sparkconnect import javaless_env

    if arm == "connect":
        return javaless_env(url)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("RAY_ADDRESS", None)  # the ray arm's own local Ray
    if arm == "ray-cluster":
        env.update(ray or {})
    if "@" in arm:
        env["PYTHONPATH"] = str((trees or {})[arm.split("@", 1)[1]])
    return env


def baseline_tree(rev: str, work: Path) -> Path:
    """``memwal/`` and ``jobs/`` of git revision ``rev`` (its Spark engine as ``memwal.spark``),
    compiled, under ``work``: what a ``classic@REV`` arm runs, to find where time went between
    revisions (the venv's packages are this one's)."""
    tree = work / f"baseline-{rev}"
    if not (tree / "memwal" / "spark").exists():
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "memwal", "jobs"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        (tree / "memwal" / "spark").symlink_to(tree / "jobs")
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "memwal"), str(tree / "jobs")],
                       check=False, capture_output=True)
    return tree


def _read_all(path: str) -> None:
    """Read every file under ``path``: their access times are then newer than their changes, so
    a reader's first read updates none (``relatime``)."""
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError), open(os.path.join(root, name), "rb") as f:
                while f.read(1 << 20):
                    pass


def one_run(pristine: str, copy: Path, arm: str, env: dict[str, str], logs: Path, *,
            pre_read: bool = False) -> dict[str, Any]:
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(pristine, copy)
    before = _files(str(copy))
    if pre_read:
        _read_all(str(copy))
    # The copy's own writeback is not the merge's; and the listing above, which updates the
    # folders' access times, must not leave their inode blocks dirty for the worker (a page
    # already dirty is charged to no one again: the driver's share would read low).
    os.sync()
    result = logs / f"{copy.name}-{arm}.json"
    result.unlink(missing_ok=True)
    engine = "local" if arm == "local" else "ray" if arm.startswith("ray") else "spark"
    cmd = [sys.executable, "-m", "bench.spark.connect", "worker", str(copy), engine, str(result)]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    whole = time.perf_counter() - t0
    if proc.returncode != 0 or not result.exists():
        err = "\n".join(x for x in proc.stderr.splitlines() if NOISE not in x)[-3000:]
        raise RuntimeError(f"the {arm} merge exited {proc.returncode}:\n{err}")
    doc = json.loads(result.read_text())
    added = {k: v for k, v in _files(str(copy)).items() if k not in before}
    data = sum(v for k, v in added.items() if k.startswith(("data/", "_deletions/")))
    meta = sum(v for k, v in added.items() if k.startswith(("_versions/", "_transactions/", "_indices/")))
    return {**doc, "whole_seconds": round(whole, 3), "data_bytes_added": data, "metadata_bytes_added": meta,
            "load_average_before": round(load, 2), "load_average_after": round(os.getloadavg()[0], 2),
            "driver_share": doc["driver_io"]["write_bytes"] / data if data else None,
            "driver_share_wchar": doc["driver_io"]["wchar"] / data if data else None}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    secs = [r["whole_seconds"] for r in runs]
    shares = [r["driver_share"] for r in runs if r["driver_share"] is not None]
    return {"whole_seconds": statistics.median(secs), "whole_seconds_min": min(secs), "whole_seconds_max": max(secs),
            "merge_seconds": statistics.median(r["merge_seconds"] for r in runs),
            "driver_share": statistics.median(shares) if shares else None,
            "driver_share_max": max(shares) if shares else None,
            "driver_write_bytes": [r["driver_io"]["write_bytes"] for r in runs],
            "driver_wchar": [r["driver_io"]["wchar"] for r in runs],
            "data_bytes_added": statistics.median(r["data_bytes_added"] for r in runs),
            "executors_wall_seconds": _median(r["timings"].get("executors_wall_seconds") for r in runs),
            "session_wait_seconds": _median(r["timings"].get("context_wait_seconds") for r in runs),
            "shape": runs[-1]["timings"].get("shape"), "commit_path": runs[-1]["commit_path"],
            "load_average": [r["load_average_before"] for r in runs], "runs": runs}


def _median(values: Any) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def run(out: str | Path = "bench-results", *, work: str | Path | None = None, change_rows: int = 2_000_000,
        repeats: int = REPEATS, arms: tuple[str, ...] = ARMS, pre_read: bool = False,
        baselines: tuple[str, ...] = ()) -> dict[str, Any]:
    from bench.merge.compare import table_state
    from bench.spark.breakdown import ensure_table
    from tests.raycluster import ray_cluster
    from tests.sparkconnect import ConnectServer

    out, work = Path(out), Path(work or Path(out) / "spark-work")
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    pristine, info = ensure_table(work, change_rows)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    arms = (*arms, *(f"classic@{rev}" for rev in baselines))
    trees = {rev: baseline_tree(rev, work) for rev in baselines}
    copies = {a: work / f"copy-connect-{a.replace('@', '-')}" for a in arms}
    server_dir = work / "connect-server"
    server_dir.mkdir(exist_ok=True)
    with contextlib.ExitStack() as stack:
        url, ray = "", None
        if "connect" in arms:
            log("starting a Spark Connect server (local[2])")
            server = ConnectServer(server_dir, conf={"spark.driver.memory": "2g"}).start()
            stack.callback(server.stop)
            url = server.url
        if "ray-cluster" in arms:
            log(f"starting a Ray cluster ({os.cpu_count()} CPUs)")
            (work / "ray-cluster").mkdir(exist_ok=True)
            cluster = stack.enter_context(ray_cluster(work / "ray-cluster", cpus=os.cpu_count() or 1))
            ray = {"RAY_ADDRESS": cluster.address, **cluster.env}
        envs = {a: arm_env(a, url, trees, ray) for a in arms}
        for a in arms:  # untimed: each arm's code, Spark's jars and the server's workers warm
            log(f"{a} (warm-up)")
            one_run(pristine, copies[a], a, envs[a], logs)
        runs: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
        for i in range(repeats):
            for a in arms:
                time.sleep(PAUSE)
                log(f"{a} ({i + 1}/{repeats})")
                runs[a].append(one_run(pristine, copies[a], a, envs[a], logs, pre_read=pre_read))
    states = {a: table_state(str(copies[a])) for a in arms}
    first = states[arms[0]]
    doc: dict[str, Any] = {
        "change_rows": info["change_rows"], "base_rows": info["base_rows"], "generations": info["generations"],
        "cpus": os.cpu_count(), "repeats": repeats, "pre_read": pre_read,
        "identical": all(s[0].combine_chunks().equals(first[0].combine_chunks()) and s[1] == first[1]
                         for s in states.values()),
        "arms": {a: summary(r) for a, r in runs.items()},
    }
    arm = doc["arms"]
    if "connect" in arm and "classic" in arm:
        doc["connect_over_classic"] = round(arm["connect"]["whole_seconds"] / arm["classic"]["whole_seconds"], 3)
    if "classic" in arm and "local" in arm:
        doc["classic_over_local"] = round(arm["classic"]["whole_seconds"] / arm["local"]["whole_seconds"], 3)
    for a in ("ray", "ray-cluster"):
        if a in arm and "local" in arm:
            doc[f"{a.replace('-', '_')}_over_local"] = round(arm[a]["whole_seconds"] / arm["local"]["whole_seconds"], 3)
    if "connect" in arm and "local" in arm:
        doc["connect_over_local"] = round(arm["connect"]["whole_seconds"] / arm["local"]["whole_seconds"], 3)
    for a in arm:
        if "@" in a and "classic" in arm:
            doc[f"classic_over_{a}"] = round(arm["classic"]["whole_seconds"] / arm[a]["whole_seconds"], 3)
    doc["goals"] = {
        "connect_over_classic": {"max": CONNECT_OVER_CLASSIC_MAX, "met": doc.get("connect_over_classic", 0) <= 1.5},
        "classic_over_local": {"max": SPARK_OVER_LOCAL_MAX, "met": doc.get("classic_over_local", 0) <= 3.0},
        **{f"{a}_over_local": {"max": RAY_OVER_LOCAL_MAX, "met": doc[f"{a}_over_local"] <= RAY_OVER_LOCAL_MAX}
           for a in ("ray", "ray_cluster") if f"{a}_over_local" in doc},
        "driver_share": {"max": DRIVER_SHARE_MAX, "met": all(
            (arm[a]["driver_share_max"] or 0) <= DRIVER_SHARE_MAX for a in arm if a != "local")},
    }
    for c in copies.values():
        shutil.rmtree(c, ignore_errors=True)
    (out / "spark_connect.json").write_text(json.dumps(doc, indent=2, default=str))
    chart(doc, out / "spark_connect.png")
    return doc


def chart(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(doc["arms"])
    med = [doc["arms"][a]["whole_seconds"] for a in arms]
    low = [m - doc["arms"][a]["whole_seconds_min"] for a, m in zip(arms, med, strict=True)]
    high = [doc["arms"][a]["whole_seconds_max"] - m for a, m in zip(arms, med, strict=True)]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(arms, med, yerr=[low, high], capsize=6, color=(["#888", "#4a7", "#47a"] + ["#a74"] * len(arms))[: len(arms)])
    ax.set_ylabel("whole merge process, s (median, min-max)")
    ax.set_title(f"{doc['change_rows']:,} change rows: {', '.join(arms)}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["worker"]:
        return worker(*args[1:4])
    p = argparse.ArgumentParser(prog="python -m bench spark connect", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="bench-results")
    p.add_argument("--work", help="where tables are built and kept (default OUT/spark-work)")
    p.add_argument("--change-rows", type=int, default=2_000_000)
    p.add_argument("--repeats", type=int, default=REPEATS)
    p.add_argument("--arms", default=",".join(ARMS), help="comma-separated: local,classic,connect,ray,ray-cluster")
    p.add_argument("--baseline", action="append", default=[], metavar="REV",
                   help="also an arm classic@REV: the Spark engine of git revision REV, interleaved (repeatable)")
    p.add_argument("--pre-read", action="store_true",
                   help="read every file of each copy first: the driver's writes without the access-time updates "
                        "its reads cause on a relatime mount (a diagnosis, not the goal's figure)")
    a = p.parse_args(args)
    doc = run(a.out, work=a.work, change_rows=a.change_rows, repeats=a.repeats, arms=tuple(a.arms.split(",")),
              pre_read=a.pre_read, baselines=tuple(a.baseline))
    print(json.dumps({k: v for k, v in doc.items() if k != "arms"}, indent=2))
    for arm, s in doc["arms"].items():
        print(f"{arm:8} {s['whole_seconds']:.2f} s ({s['whole_seconds_min']:.2f}-{s['whole_seconds_max']:.2f}) "
              f"driver share {s['driver_share']} loads {s['load_average']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
