"""A fleet's round over aged tables, local against Ray: ``python -m bench fleet aged`` (issue 85).

Usage::

    .venv/bin/python -m bench fleet aged [--flushes 3000] [--tables 12] [--runs 3]
        [--arms local,ray-cluster] [--from AGED] [--work DIR] [--out DIR]

In ``make bench``, which ages its table first (kept in ``--work``: the next run reuses it); it
starts a Ray cluster on loopback. The shape: a fleet taken over by memwal after its writers aged its
tables (a first deployment, or tables whose records were lost), so each table's whole GC has no
digest of its retained versions' progress and reads every retained manifest
(``docs/concepts/gc.md``): seconds of Python work a table. One table is aged as a follower would age
it (``bench.read.age``: a pylance ``ShardWriter`` flushing 60 rows, each merged, the listing,
compaction and whole GC passes on their cadences) to ``--flushes``, or taken from ``--from``; each
run hard-links ``--tables`` copies of it (``cp -al``: every job writes new files and removes links,
never a file in place) and removes each copy's digest (``_mem_wal/_jobs/retained-progress.json``),
then times ``memwal fleet run FLEET --json`` as a whole process:

* ``local``: the local engine, two tables at a time (``--workers``' default) on threads of the process;
* ``ray-cluster``: ``--engine ray`` with ``RAY_ADDRESS`` at a one-node Ray cluster of the machine's
  cores on loopback (``ray start --head``, started once, tests/raycluster.py): a table per task, in
  the cluster's worker processes;
* ``ray``: ``--engine ray`` with a local Ray started by the process.

The arms run interleaved (the order reversed every other run), each on a fresh fleet, and must
leave the same outcomes (the jobs done, waiting and failed). Recorded per run: wall seconds, the
driver's CPU (the process and its children: not the cluster's workers) and the machine's busy
CPU seconds over the run (``/proc/stat``, every process: the workers too). Goal (issue 85): Ray
faster than local on this machine, by more than the runs' spread.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.harness import processes
from bench.harness.results import Run, parser
from bench.harness.stats import ratio, spread

DIGEST = Path("_mem_wal", "_jobs", "retained-progress.json")
ARMS = ("local", "ray-cluster")
#: Seconds between runs: the last one's page cache writes settle.
PAUSE = 2.0


def busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy since boot (``/proc/stat``: all but idle
    and I/O wait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def aged_table(work: Path, flushes: int, start: str | None, log: Any) -> Path:
    """The aged table the fleet copies: ``start``, else ``work/aged/age-N`` (aged once, kept)."""
    if start:
        return Path(start).resolve()
    keep = work / "aged"
    source = keep / f"age-{flushes}"
    if not source.exists():
        from bench.read.age import age

        keep.mkdir(parents=True, exist_ok=True)
        scratch = work / "aging"
        shutil.rmtree(scratch, ignore_errors=True)
        age(str(scratch), [flushes], keep, log)
        shutil.rmtree(scratch, ignore_errors=True)
    return source


def fresh_fleet(source: Path, fleet: Path, tables: int) -> None:
    """``tables`` hard-linked copies of ``source`` under ``fleet``, each without its digest."""
    subprocess.run(["rm", "-rf", str(fleet)], check=True)  # hundreds of thousands of links: faster than rmtree
    fleet.mkdir(parents=True)
    for i in range(tables):
        copy = fleet / f"t{i:03d}"
        subprocess.run(["cp", "-al", str(source), str(copy)], check=True)
        (copy / DIGEST).unlink(missing_ok=True)


def one_run(fleet: Path, arm: str, env: dict[str, str]) -> dict[str, Any]:
    """``memwal fleet run`` of ``fleet`` on ``arm``: its figures and outcomes."""
    argv = ["fleet", "run", str(fleet), "--json", *(["--engine", "ray"] if arm != "local" else [])]
    before = busy_seconds()
    proc = processes.memwal(*argv, env=env)
    busy = busy_seconds() - before
    doc = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    if not proc.ok or doc.get("failed_tables"):
        raise processes.BenchFailed(f"{arm}: fleet run exited {proc.rc}: {proc.error()}")
    return {"seconds": round(proc.seconds, 3), "driver_cpu_seconds": round(proc.cpu_seconds, 3),
            "machine_busy_seconds": round(busy, 3), "rounds": doc.get("rounds"),
            "fleet_seconds": doc.get("seconds"), "outcomes": doc.get("summary")}


def arm_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"runs": runs, "seconds": spread(r["seconds"] for r in runs),
            "machine_busy_seconds": spread(r["machine_busy_seconds"] for r in runs)}


def main(argv: list[str] | None = None) -> int:
    p = parser("fleet aged", __doc__)
    p.add_argument("--flushes", type=int, default=3000, help="flushes the table is aged by (default 3000)")
    p.add_argument("--from", dest="start", default=None, help="an aged table to copy instead (bench read age --work)")
    p.add_argument("--tables", type=int, default=12, help="tables in the fleet (default 12)")
    p.add_argument("--runs", type=int, default=3, help="timed runs of each arm (default 3)")
    p.add_argument("--arms", default=",".join(ARMS), help="local, ray-cluster, ray (default local,ray-cluster)")
    args = p.parse_args(argv)
    arms = tuple(a for a in args.arms.split(",") if a)
    unknown = set(arms) - {"local", "ray", "ray-cluster"}
    if unknown:
        p.error(f"unknown arm(s) {', '.join(sorted(unknown))}: local, ray-cluster, ray")
    from memwal.core.process import configure_process

    configure_process()  # the aging runs in this process
    with Run("fleet_aged", "a fleet's round over aged tables, local against Ray", out=args.out, work=args.work,
             flushes=None if args.start else args.flushes, tables=args.tables, runs=args.runs,
             arms=list(arms)) as bench, \
            contextlib.ExitStack() as stack:
        source = aged_table(bench.work, args.flushes, args.start, bench.log)
        bench.doc["source"] = str(source)
        bench.doc["source_versions"] = sum(n.endswith(".manifest") for n in os.listdir(source / "_versions"))
        base = {k: v for k, v in processes.env().items() if k != "RAY_ADDRESS"}
        envs = {a: base for a in arms}
        if "ray-cluster" in arms:
            from tests.raycluster import ray_cluster

            folder = bench.work / "ray-cluster"
            folder.mkdir(exist_ok=True)
            bench.log(f"starting a Ray cluster ({os.cpu_count()} CPUs)")
            cluster = stack.enter_context(ray_cluster(folder, cpus=os.cpu_count() or 1))
            envs["ray-cluster"] = {**base, **cluster.env, "RAY_ADDRESS": cluster.address}
        fleet = bench.work / "fleet"
        runs: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
        for i in range(args.runs):
            for arm in arms if i % 2 == 0 else tuple(reversed(arms)):
                fresh_fleet(source, fleet, args.tables)
                time.sleep(PAUSE)
                runs[arm].append(one_run(fleet, arm, envs[arm]))
                bench.log(f"{arm} ({i + 1}/{args.runs}): {json.dumps(runs[arm][-1])}")
        subprocess.run(["rm", "-rf", str(fleet)], check=True)
        outcomes = {json.dumps(r["outcomes"], sort_keys=True) for rs in runs.values() for r in rs}
        if len(outcomes) != 1:
            raise processes.BenchFailed(f"the arms left different outcomes: {sorted(outcomes)}")
        bench.doc["arms"] = {a: arm_summary(r) for a, r in runs.items()}
        if "local" in arms:
            local = bench.doc["arms"]["local"]["seconds"]
            for a in (x for x in arms if x != "local"):
                mine, key = bench.doc["arms"][a]["seconds"], a.replace("-", "_")
                bench.doc[f"{key}_over_local"] = ratio(mine["median"], local["median"], 3)
                bench.doc.setdefault("goals", {})[f"{key}_beats_local"] = {"met": mine["max"] < local["min"]}
        bench.publish(summary=lambda d: "; ".join(
            f"{a}: {s['seconds']['median']} s ({s['seconds']['min']}-{s['seconds']['max']})"
            for a, s in d["arms"].items()))
    return 0
