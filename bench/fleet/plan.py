"""What ``memwal fleet plan`` costs (issue 39, section 3): time on a local disk, requests on S3 and Azure.

Usage::

    .venv/bin/python -m bench fleet plan --work bench-results/fleet-work [--sizes 100,300,1000] [--out DIR]

The lake: small tables written by pylance's ``ShardWriter`` (300 base rows, a BTREE and an
IVF_PQ index, 2 shards, 3 generations of 10 rows per shard, none merged: every table has work,
the plan's dearest case: it reads each shard's manifest and the lease folder too; with fewer than
256 rows Lance records no catch-up of the IVF_PQ index, and such a table's catchup fails), built
once into ``<work>/lake`` and reused while its recipe is the same. The tables are spread over
folders by ``--sizes`` (100, 300, 1,000: ``p0`` holds the first 100, ``p1`` the next 200, ...),
so that the sources ``p0``, ``p0 p1``, ``p0 p1 p2`` are fleets of each size, discovery included.

Local disk, interleaved over the sizes ``--runs`` times (medians):

* ``memwal fleet plan SOURCE... --json`` as a whole process (the goal: 1,000 tables in 10 s on
  2 cores), with no cache and with a warm ``--cache`` (written by an untimed first run);
* discovery and planning in this process (no cache), for the linearity: seconds per table at
  each size, and the largest size's against the smallest's (goal: at most 1.25x).

On S3 (moto) and Azure (Azurite), requests counted by the servers themselves (as
:mod:`bench.harness.requests`), for ``--store-tables`` idle tables (the lake's tables
uploaded, then drained by the fleet runner with GC's grace period and version expiry at 0)
and as many tables with work: each plan as a whole CLI process, cold (no cache), warm (the cache
of the run before, nothing changed) and, for the tables with work, warm after a writer flushed
one more generation to each shard (and the maintained tables, which hold lease records and run
history, after one more flush each). Requests are split per table by their key (the root's listing
during discovery is shared). Goal: an idle table with a warm cache costs at most 4 requests.
Beside it, what today's per-table shape costs the same idle tables: ``memwal status`` (the lag
sensor's poll) and a whole ``memwal cycle`` (the scheduled run), counted the same way.

Writes ``OUT/fleet_plan.json`` and ``OUT/fleet_plan.png``. Figures only: nothing is asserted.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from bench.data.fleet import build_lake, parts_of, small_workload, table_name
from bench.fleet.report import GOAL_IDLE_REQUESTS, GOAL_LINEAR, GOAL_SECONDS, plan_chart, plan_summary
from bench.harness.processes import Proc, memwal
from bench.harness.requests import RequestCounter, bucket_of, request_kind, table_files, upload
from bench.harness.results import Run, log, parser

#: Drains a table completely: GC takes every merged generation at once.
DRAIN_POLICY = {"defaults": {"options": {"gc": {"grace_seconds": 0, "writer_idle_seconds": 0, "expire_versions": 0}}}}
_TABLE_NAME = re.compile(r"/(t\d{4,})(?:/|$)")


def cli(argv: list[str], options: dict[str, str] | None = None) -> Proc:
    """``memwal ARGV`` as a whole process, timed from exec to exit (storage options in a file)."""
    return memwal(*argv, options=options)


def _failed(what: str, proc: Proc) -> RuntimeError:
    return RuntimeError(f"{what} exited {proc.rc}: {proc.error(1500)}")


def cli_plan(sources: list[str], *, cache: str | None = None, options: dict[str, str] | None = None) -> dict[str, Any]:
    """``memwal fleet plan SOURCE... --json`` as a whole process."""
    proc = cli(["fleet", "plan", *sources, "--json", *(["--cache", cache] if cache else [])], options)
    seconds = proc.seconds
    if proc.rc != 0:
        raise _failed("fleet plan", proc)
    doc = json.loads(proc.stdout)
    return {"seconds": seconds, "discovered": doc["discovered"],
            "with_work": sum(1 for t in doc["tables"] if t["jobs"]), "probe_requests": doc["requests"],
            "plan_seconds": doc["seconds"], "problems": len(doc["problems"])}


def in_process(sources: list[str]) -> dict[str, float]:
    """Discovery and the plan in this process, no cache."""
    from memwal.fleet.cache import ProbeCache
    from memwal.fleet.plan import plan_fleet
    from memwal.fleet.policy import Policy
    from memwal.fleet.sources import discover

    t0 = time.perf_counter()
    found = discover(sources)
    t1 = time.perf_counter()
    plan = plan_fleet(found, Policy(), cache=ProbeCache())
    t2 = time.perf_counter()
    return {"discover_seconds": t1 - t0, "plan_seconds": t2 - t1, "seconds": t2 - t0, "tables": len(plan.tables)}


def measure_local(lake: Path, sizes: list[int], runs: int, work: Path) -> dict[str, Any]:
    parts = [str(lake / p) for p, _ in parts_of(sizes)]
    samples: dict[int, dict[str, list[float]]] = {n: {"cold": [], "warm": [], "in_process": [], "discover": [],
                                                      "plan": []} for n in sizes}
    seen: dict[int, dict[str, Any]] = {}
    for n in sizes:  # prime each size's cache, and this process's imports (untimed)
        cli_plan(parts[:sizes.index(n) + 1], cache=str(work / f"cache-{n}.json"))
    in_process(parts[:1])
    for r in range(runs):
        for k, n in enumerate(sizes):
            sources = parts[:k + 1]
            cold = cli_plan(sources)
            warm = cli_plan(sources, cache=str(work / f"cache-{n}.json"))
            inner = in_process(sources)
            s = samples[n]
            s["cold"].append(cold["seconds"])
            s["warm"].append(warm["seconds"])
            s["in_process"].append(inner["seconds"])
            s["discover"].append(inner["discover_seconds"])
            s["plan"].append(inner["plan_seconds"])
            seen[n] = {"discovered": cold["discovered"], "with_work": cold["with_work"], "problems": cold["problems"]}
            log(f"run {r + 1}/{runs}, {n} tables: cold {cold['seconds']:.2f}s, warm {warm['seconds']:.2f}s, "
                f"in-process {inner['seconds']:.2f}s")
    points = []
    for n in sizes:
        s = samples[n]
        med = {k: statistics.median(v) for k, v in s.items()}
        points.append({"tables": n, **seen[n], "cli_cold_seconds": round(med["cold"], 3),
                       "cli_warm_seconds": round(med["warm"], 3), "in_process_seconds": round(med["in_process"], 3),
                       "discover_seconds": round(med["discover"], 3), "plan_seconds": round(med["plan"], 3),
                       "ms_per_table_in_process": round(1000 * med["in_process"] / n, 3),
                       "ms_per_table_cli_cold": round(1000 * med["cold"] / n, 3),
                       "samples": {k: [round(x, 3) for x in v] for k, v in s.items()}})
    small, large = points[0], points[-1]
    linear = large["ms_per_table_in_process"] / small["ms_per_table_in_process"]
    slope = (large["cli_cold_seconds"] - small["cli_cold_seconds"]) / max(large["tables"] - small["tables"], 1)
    return {"points": points, "largest_over_smallest_per_table": round(linear, 3),
            "cli_marginal_ms_per_table": round(1000 * slope, 3),
            "goal_seconds": GOAL_SECONDS, "goal_met": large["cli_cold_seconds"] <= GOAL_SECONDS,
            "goal_linear_max": GOAL_LINEAR, "linear_met": linear <= GOAL_LINEAR}


# --------------------------------------------------------------------------- object stores


def _per_table(requests: list[tuple[str, str]]) -> tuple[Counter[str], int]:
    """Requests by the table their key names, and those naming none (the root's listing)."""
    by_table: Counter[str] = Counter()
    shared = 0
    for _, path in requests:
        m = _TABLE_NAME.search(unquote(path).replace("?", "/").replace("&", "/").replace("=", "/"))
        if m:
            by_table[m.group(1)] += 1
        else:
            shared += 1
    return by_table, shared


def _counted(counter: Any, tables: int, run: dict[str, Any]) -> dict[str, Any]:
    requests = counter.take_requests()
    by_table, shared = _per_table(requests)
    return {"tables": tables, "requests": len(requests), "per_table": round(len(requests) / tables, 2),
            "per_table_max": max(by_table.values(), default=0), "shared": shared,
            "by_kind": dict(Counter(request_kind(m, p) for m, p in requests)),
            "probe_count_per_table": round(run["probe_requests"] / tables, 2), "with_work": run["with_work"],
            "discovered": run["discovered"], "seconds": round(run["seconds"], 2)}


def _flush_one_more(uri: str, seed: int, options: dict[str, str]) -> None:
    """One more generation in every shard of the table (a live writer's flush)."""
    import lance
    import numpy as np

    from bench.data.tiny import _rows
    from memwal.demo import shard_ids_for

    ds = lance.dataset(uri, storage_options=options)
    wl = small_workload(seed)
    for bucket, shard in enumerate(shard_ids_for(wl)):
        writer = ds.mem_wal_writer(shard, max_memtable_rows=4, durable_write=False)
        try:
            writer.put(_rows(ds.schema, (np.arange(4) + 10_000) * wl.shards + bucket))
        finally:
            writer.close()


def _today(counter: Any, tables: list[str], opts: dict[str, str]) -> dict[str, Any]:
    """What today's per-table shape costs an idle table, counted at the server: the lag check
    (``memwal status``, the lag sensor's poll) and a whole scheduled cycle (``memwal cycle``)."""
    out: dict[str, Any] = {}
    for name, argv in (("status", ["status", "--json"]), ("cycle", ["cycle", "--json"])):
        counter.take()
        for uri in tables:
            proc = cli([argv[0], uri, *argv[1:]], opts)
            if proc.rc != 0:
                raise _failed(f"memwal {name}", proc)
        requests = counter.take_requests()
        by_table, shared = _per_table(requests)
        out[name] = {"per_table": round(len(requests) / len(tables), 2), "per_table_max": max(by_table.values()),
                     "shared": shared}
    return out


def measure_store(kind: str, server: Any, lake: Path, sizes: list[int], n: int, work: Path) -> dict[str, Any]:
    """Idle and busy tables on one object store: requests per table, counted by the server."""
    from memwal.fleet.policy import policy_from
    from memwal.fleet.run import run_fleet

    root, opts = server.new_table("fleet")
    bucket = bucket_of(kind, server)
    part, numbers = parts_of(sizes)[0]
    chosen = list(numbers)[:2 * n]
    groups = {"idle": chosen[:n], "work": chosen[n:]}
    t0 = time.perf_counter()
    for group, members in groups.items():
        for i in members:
            files = table_files(lake / part / table_name(i))
            upload(kind, server, bucket, f"fleet/{group}/{table_name(i)}", files)
    upload_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    drained = run_fleet([f"{root}/idle"], policy=policy_from(DRAIN_POLICY), storage_options=opts, workers=2)
    drain_s = time.perf_counter() - t0
    log(f"{kind}: uploaded {2 * n} tables in {upload_s:.0f}s, drained {n} in {drain_s:.0f}s "
        f"({len(drained.rounds)} rounds, {len(drained.failed)} failed)")
    counter = RequestCounter(kind, server)
    out: dict[str, Any] = {"upload_seconds": round(upload_s, 1), "drain_seconds": round(drain_s, 1),
                           "drain_rounds": len(drained.rounds), "drain_failed": [r.table for r in drained.failed]}
    for group in ("idle", "work"):
        cache = str(work / f"{kind}-{group}-cache.json")
        Path(cache).unlink(missing_ok=True)
        src = [f"{root}/{group}"]
        counter.take()
        out[f"{group}_cold"] = _counted(counter, n, cli_plan(src, cache=cache, options=opts))
        out[f"{group}_warm"] = _counted(counter, n, cli_plan(src, cache=cache, options=opts))
    for i in groups["work"]:
        _flush_one_more(f"{root}/work/{table_name(i)}", i, opts)
    counter.take()
    out["work_warm_after_a_flush"] = _counted(counter, n, cli_plan([f"{root}/work"], cache=str(
        work / f"{kind}-work-cache.json"), options=opts))
    out["today_per_idle_table"] = _today(counter, [f"{root}/idle/{table_name(i)}" for i in groups["idle"]], opts)
    for i in groups["idle"]:  # maintained tables (lease records, history) that take new data
        _flush_one_more(f"{root}/idle/{table_name(i)}", i, opts)
    counter.take()
    out["maintained_warm_after_a_flush"] = _counted(counter, n, cli_plan([f"{root}/idle"], cache=str(
        work / f"{kind}-idle-cache.json"), options=opts))
    idle = out["idle_warm"]
    out["goal_idle_requests"] = GOAL_IDLE_REQUESTS
    out["idle_goal_met"] = idle["per_table"] <= GOAL_IDLE_REQUESTS and idle["per_table_max"] <= GOAL_IDLE_REQUESTS \
        and idle["with_work"] == 0
    return out


def main(argv: list[str] | None = None) -> int:
    p = parser("fleet plan", __doc__)
    p.add_argument("--sizes", default="100,300,1000", help="fleet sizes, ascending (the last is the lake's size)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--store-tables", type=int, default=8, help="idle tables, and as many with work, per object store")
    p.add_argument("--no-stores", action="store_true", help="skip moto and Azurite")
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    if sizes != sorted(set(sizes)) or 2 * args.store_tables > sizes[0]:
        p.error("--sizes must ascend, and the smallest must hold 2 x --store-tables tables")
    with Run("fleet_plan", "what memwal fleet plan costs: time on a disk, requests on S3 and Azure", out=args.out,
             work=args.work) as bench:
        work, doc = bench.work, bench.doc
        doc["lake"] = build_lake(work / "lake", sizes)
        bench.log(f"lake: {doc['lake']}")
        doc["local"] = measure_local(work / "lake", sizes, args.runs, work)
        if not args.no_stores:
            from tests.azureserver import start_azure_server
            from tests.s3server import start_s3_server

            for name, kind, start in (("moto", "s3", start_s3_server), ("azurite", "azure", start_azure_server)):
                try:
                    server = start()
                except Exception as exc:  # noqa: BLE001 - a missing emulator is reported, not fatal
                    doc[name] = {"skipped": f"{type(exc).__name__}: {exc}"}
                    continue
                try:
                    doc[name] = measure_store(kind, server, work / "lake", sizes, args.store_tables, work)
                finally:
                    server.stop()
        bench.publish(draw=plan_chart, summary=plan_summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
