"""A fleet simulation (issue 39, section 7): live writers at different rates, one runner under a budget.

Usage::

    .venv/bin/python -m bench fleet sim --work bench-results/fleet-sim [--tables 40] [--tick 8] [--out DIR]

``--tables`` small tables (:data:`bench.data.fleet.RECIPE`, no generation yet) take writes from
live pylance ``ShardWriter``s in two writer processes (:mod:`bench.fleet.load`): ``--hot`` tables
flush ``--hot-rate`` generations a tick, ``--idle`` tables none, the rest (cold) ``--cold-rate``,
each as a Poisson process drawn from ``--seed`` alone. The load lasts ``--load-ticks`` ticks of
``--tick`` seconds; the maintenance goes on ``--cooldown-ticks`` more. Two phases, on fresh copies
of the same tables, under the same load and the same budget of ``--workers`` tables at a time:

* ``fleet``: each tick, one round of the fleet runner (``run_fleet(max_rounds=1)``, as ``memwal
  fleet run --max-rounds 1`` from a timer): plan every table, run the ones with work, highest
  debt first; one probe cache for the whole run (``--cache``);
* ``fixed``: today's shape: every table's whole cycle on its own fixed schedule, every
  ``--every`` ticks, all at the same moment (in a shuffled order), at most one run of a table at
  a time, ``--workers`` at once (an Airflow pool).

Both use one policy: GC's grace period a tick, version expiry ``--every`` + 1 ticks, the rest the
defaults.
Reported per phase (:mod:`bench.fleet.lag`): p50/p99/max of flush -> merged lag, by class and the
fairness within a class, starved tables, GC's backlog over time, requests per table per tick
through memwal's store layer (:mod:`bench.fleet.count`; Lance's own I/O not counted), how busy
the workers were, and a final check: after the phase, every table merged to the end holds
exactly its base rows and every row its writers put. Goals: p99 lag at most 2 ticks while the
load is under capacity, no table's mean lag above 2x another's of its class (counted from the start
of each flush's tick: see :mod:`bench.fleet.lag`), an idle table at most 4 requests a tick. Writes
``OUT/fleet.json`` and ``OUT/fleet.png``; asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.data.fleet import RECIPE, small_workload, table_name
from bench.data.tables import copy_table
from bench.fleet import lag as fleet_lag
from bench.fleet.count import counting
from bench.fleet.record import Recorder, shards_on_storage
from bench.fleet.report import GOAL_FAIRNESS, GOAL_IDLE_REQUESTS, GOAL_P99_TICKS, chart, summary
from bench.harness.processes import ROOT, env
from bench.harness.results import Run, parser
from bench.harness.results import log as _log

ROWS_PER_GENERATION = 10


def log(msg: str) -> None:
    _log(msg, "fleet-sim")


#: The service level of the simulation's tables: the oldest unmerged generation at most this
#: many ticks old (the ``fleet`` phase serves tables past it first; ``fleet-debt`` has none).
SLO_TICKS = 1.5


def policy_doc(tick: float, every: int, *, slo: bool = True) -> dict[str, Any]:
    """GC's grace period a tick, version expiry ``every + 1`` ticks. GC's grace runs from the first
    retained version that merged a generation, so the versions a GC needs must outlive the time
    between two GCs: with expiry shorter than the fixed schedule's period, each cycle's GC would
    find only the versions its own cycle just committed, and never collect. The service level:
    :data:`SLO_TICKS` (none: ordered by debt alone, as before service levels)."""
    target = {"oldest_unmerged_seconds": SLO_TICKS * tick} if slo else {"oldest_unmerged_seconds": None,
                                                                        "generations_per_shard": None}
    return {"defaults": {"options": {"gc": {"grace_seconds": tick, "expire_versions": (every + 1) * tick}},
                         "slo": target}}


def classes_of(n: int, hot: int, idle: int) -> list[str]:
    return ["hot"] * hot + ["cold"] * (n - hot - idle) + ["idle"] * idle


def build_pristine(folder: Path, n: int) -> list[str]:
    """``n`` base tables (no generation), built once and reused."""
    from memwal.demo import create_base_table

    stamp = folder / "built.json"
    names = [table_name(i) for i in range(n)]
    if stamp.exists() and json.loads(stamp.read_text()) == {"recipe": RECIPE, "tables": n}:
        return names
    shutil.rmtree(folder, ignore_errors=True)
    for i, name in enumerate(names):
        create_base_table(str(folder / name), small_workload(i, generations=0))
    stamp.write_text(json.dumps({"recipe": RECIPE, "tables": n}))
    return names


def _wait_until(at: float) -> float:
    """Sleep until ``at``; how late the caller already was (0 when on time)."""
    delay = at - time.time()
    if delay > 0:
        time.sleep(delay)
    return max(0.0, -delay)


def _hear(plans: list[Any], rec: Recorder, event: str, value: Any) -> None:
    if event == "round":
        plans.append(value)
    elif event == "table":
        rec.table_run(value)


def fleet_ticks(lake: Path, cfg: argparse.Namespace, t0: float, total: int, rec: Recorder,
                sample: Any) -> list[dict[str, Any]]:
    """One round of the fleet runner a tick (see the module docstring)."""
    from memwal.fleet.cache import ProbeCache
    from memwal.fleet.policy import policy_from
    from memwal.fleet.run import run_fleet

    policy = policy_from(policy_doc(cfg.tick, cfg.every, slo=cfg.mode != "fleet-debt"))
    cache = ProbeCache()
    ticks = []
    rec.meter.take()
    for k in range(total):
        late = _wait_until(t0 + k * cfg.tick)
        if k:
            ticks[-1]["requests"] = dict(rec.meter.take())
        sample()
        plans: list[Any] = []
        started = time.time()
        run_fleet([str(lake)], policy=policy, workers=cfg.workers, max_rounds=1, max_seconds=cfg.tick, cache=cache,
                  notify=functools.partial(_hear, plans, rec))
        plan = plans[0]
        ticks.append({"tick": k, "late_seconds": round(late, 3), "round_seconds": round(time.time() - started, 3),
                      "plan_seconds": round(plan.seconds, 3), "tables_with_work": len(plan.with_work()),
                      "debt": plan.debt, "collectable_generations": sum(t.state.collectable_generations
                                                                        for t in plan.tables)})
    _wait_until(t0 + total * cfg.tick)
    ticks[-1]["requests"] = dict(rec.meter.take())
    return ticks


def event_ticks(lake: Path, cfg: argparse.Namespace, t0: float, total: int, rec: Recorder,
                sample: Any) -> list[dict[str, Any]]:
    """The fleet woken by events (issue 48): a round of the tables the writers flushed to as the
    flushes come (the flush log stands for the SQS queue the bucket notifies), and a round of
    every table only every ``--every`` ticks (the safety net)."""
    from memwal.fleet.cache import ProbeCache
    from memwal.fleet.policy import policy_from
    from memwal.fleet.run import run_fleet

    policy = policy_from(policy_doc(cfg.tick, cfg.every))
    cache = ProbeCache()
    read = {str(p): 0 for p in cfg.flush_logs}
    ticks = []
    rec.meter.take()
    for k in range(total):
        late = _wait_until(t0 + k * cfg.tick)
        end = t0 + (k + 1) * cfg.tick
        if k:
            ticks[-1]["requests"] = dict(rec.meter.take())
        sample()
        rounds = 0
        if k % cfg.every == 0:  # the safety net
            run_fleet([str(lake)], policy=policy, workers=cfg.workers, max_rounds=1, max_seconds=cfg.tick,
                      cache=cache, notify=functools.partial(_hear, [], rec))
            rounds += 1
        while time.time() < end:
            woken = _written(read)
            if not woken:
                time.sleep(0.05)
                continue
            run_fleet(sorted(woken), policy=policy, workers=cfg.workers, max_rounds=1,
                      max_seconds=max(0.0, end - time.time()), cache=cache, notify=functools.partial(_hear, [], rec))
            rounds += 1
        ticks.append({"tick": k, "late_seconds": round(late, 3), "rounds": rounds})
    _wait_until(t0 + total * cfg.tick)
    ticks[-1]["requests"] = dict(rec.meter.take())
    return ticks


def _written(read: dict[str, int]) -> set[str]:
    """The tables flushed to since the last call (new lines of the writers' logs)."""
    out = set()
    for path, done in read.items():
        try:
            lines = Path(path).read_text().splitlines()
        except FileNotFoundError:
            continue
        complete = [line for line in lines[done:] if line.endswith("}")]
        read[path] = done + len(complete)
        out.update(json.loads(line)["table"] for line in complete)
    return out


def fixed_ticks(lake: Path, cfg: argparse.Namespace, t0: float, total: int, rec: Recorder,
                sample: Any) -> list[dict[str, Any]]:
    """Today's shape: every table's whole cycle every ``--every`` ticks, all at once (see the module docstring)."""
    from memwal.cycle import JOB_ORDER
    from memwal.fleet.policy import policy_from
    from memwal.fleet.run import TableWork, options_for, run_table_work

    policy = policy_from(policy_doc(cfg.tick, cfg.every))
    uris = sorted(str(p) for p in lake.iterdir() if p.is_dir())
    busy: set[str] = set()
    lock = threading.Lock()
    rng = random.Random(cfg.seed)

    def cycle(uri: str) -> None:
        tp = policy.for_table(uri, str(lake))
        options = {j: options_for(tp, j, engine="local", dry_run=False) for j in JOB_ORDER}
        started = time.time()
        try:
            rec.table_run(run_table_work(TableWork(uri, str(lake), 0.0, JOB_ORDER, options, {})), started)
        finally:
            with lock:
                busy.discard(uri)

    ticks = []
    rec.meter.take()
    pool = ThreadPoolExecutor(max_workers=cfg.workers, thread_name_prefix="fixed-schedule")
    try:
        for k in range(total):
            late = _wait_until(t0 + k * cfg.tick)
            if k:
                ticks[-1]["requests"] = dict(rec.meter.take())
            sample()
            started = 0
            if k % cfg.every == 0:
                for uri in rng.sample(uris, len(uris)):
                    with lock:
                        if uri in busy:
                            continue  # one run of a table at a time (max_active_runs=1)
                        busy.add(uri)
                    pool.submit(cycle, uri)
                    started += 1
            ticks.append({"tick": k, "late_seconds": round(late, 3), "runs_scheduled": started,
                          "runs_queued_or_running": len(busy)})
        _wait_until(t0 + total * cfg.tick)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # runs still queued at the end do not start
    ticks[-1]["requests"] = dict(rec.meter.take())
    return ticks


def _drain_and_check(lake: Path, uris: list[str], flushes: list[dict[str, Any]], tick: float,
                     every: int) -> dict[str, Any]:
    """Merge every table to the end, then compare its rows with what its writers put."""
    import lance

    from memwal.fleet.policy import policy_from
    from memwal.fleet.run import run_fleet

    t0 = time.time()
    drained = run_fleet([str(lake)], policy=policy_from(policy_doc(tick, every)), jobs=["merge"], workers=2)
    want = {u: RECIPE["base_rows"] for u in uris}
    for f in flushes:
        want[f["table"]] += f["rows"]
    got = {u: lance.dataset(u).count_rows() for u in uris}
    wrong = {u: {"rows": got[u], "expected": want[u]} for u in uris if got[u] != want[u]}
    return {"rows_ok": not wrong and not drained.failed, "tables_wrong": wrong,
            "drain_failed": [r.table for r in drained.failed], "drain_seconds": round(time.time() - t0, 1),
            "rows": sum(got.values())}


def run_phase(mode: str, cfg: argparse.Namespace, pristine: Path, names: list[str], work: Path) -> dict[str, Any]:
    from memwal.demo import shard_ids_for

    lake = work / mode / "lake"
    shutil.rmtree(work / mode, ignore_errors=True)
    lake.mkdir(parents=True)
    for name in names:
        copy_table(str(pristine / name), lake / name, preserve=True)
    uris = [str(lake / n) for n in names]
    classes = dict(zip(uris, classes_of(len(names), cfg.hot, cfg.idle), strict=True))
    rates = {"hot": cfg.hot_rate, "cold": cfg.cold_rate, "idle": 0.0}
    start_at = time.time() + cfg.writer_start_seconds
    writers, flush_logs = [], []
    for group in ("hot", "cold"):
        tables = [{"uri": u, "rate": rates[c], "shards": small_workload(i).shards,
                   "shard_ids": shard_ids_for(small_workload(i))} for i, (u, c) in enumerate(classes.items())
                  if c == group]
        conf, flush_log = work / mode / f"writers-{group}.json", work / mode / f"flushes-{group}.jsonl"
        conf.write_text(json.dumps({"tables": tables, "tick_seconds": cfg.tick, "load_ticks": cfg.load_ticks,
                                    "start_at": start_at, "seed": cfg.seed, "rows": ROWS_PER_GENERATION}))
        flush_logs.append(flush_log)
        with open(work / mode / f"writers-{group}.log", "wb") as err:  # the child keeps its own handle
            writers.append(subprocess.Popen([sys.executable, "-m", "bench.fleet.load", str(conf), str(flush_log)],
                                            cwd=ROOT, env=env(), stderr=err))
    total = cfg.load_ticks + cfg.cooldown_ticks
    samples: list[dict[str, Any]] = []

    def table_of(root: str) -> str:
        rel = os.path.relpath(root, lake)
        return "shared" if rel.startswith("..") or rel == "." else str(lake / rel.split(os.sep)[0])

    def sample() -> None:
        samples.append({"at": time.time(), "generations": shards_on_storage(uris)})

    log(f"{mode}: {len(uris)} tables, {total} ticks of {cfg.tick:g}s, load from "
        f"{time.strftime('%H:%M:%S', time.localtime(start_at))}")
    with counting(table_of) as meter:
        rec = Recorder(meter)
        cfg.mode, cfg.flush_logs = mode, flush_logs
        run = {"fleet-events": event_ticks, "fixed": fixed_ticks}.get(mode, fleet_ticks)
        ticks = run(lake, cfg, start_at, total, rec, sample)
    end = time.time()
    codes = [w.wait(timeout=120) for w in writers]
    flushes = [json.loads(line) for p in flush_logs if p.exists() for line in p.read_text().splitlines()]
    unflushed = [f for f in flushes if f["generation"] is None]
    flushes = [f for f in flushes if f["generation"] is not None]
    check = _drain_and_check(lake, uris, flushes + unflushed, cfg.tick, cfg.every)
    t0 = start_at
    doc = {
        "mode": mode, "writer_exit_codes": codes, "puts": sum(1 for f in flushes + unflushed if f["rows"]),
        "generations_flushed": len(flushes), "unflushed_puts": len(unflushed),
        "lag": fleet_lag.lag_figures(flushes, rec.merges, t0=start_at, end=end, tick=cfg.tick, classes=classes),
        "starvation": fleet_lag.starvation(flushes, rec.merges, t0=t0, tick=cfg.tick, ticks=total, tables=uris,
                                           n=cfg.starve_ticks),
        "gc_backlog": fleet_lag.gc_backlog(samples, rec.merges, t0=t0, tick=cfg.tick),
        "slo": fleet_lag.breaches(flushes, rec.merges, t0=t0, tick=cfg.tick, ticks=total, tables=uris,
                                  target=SLO_TICKS * cfg.tick, classes=classes),
        "requests": fleet_lag.request_figures([t.get("requests", {}) for t in ticks], classes),
        "load": fleet_lag.load_figures(rec.cycles, t0=t0, tick=cfg.tick, ticks=total, workers=cfg.workers),
        "job_statuses": dict(sorted(rec.statuses.items())), "job_seconds": dict(sorted(rec.job_seconds.items())),
        "gc_runs": rec.gc, "failed_runs": sum(c["failed"] for c in rec.cycles),
        "ticks": ticks, "late_ticks": sum(1 for t in ticks if t["late_seconds"] > 0.5), "check": check,
        "classes": {c: sum(1 for v in classes.values() if v == c) for c in ("hot", "cold", "idle")},
        "class_of": {c: sorted(Path(u).name for u, v in classes.items() if v == c) for c in ("hot", "cold", "idle")},
    }
    total_requests = sum(sum(t.get("requests", {}).values()) for t in ticks)
    doc["requests"]["total"] = total_requests
    doc["requests"]["per_generation"] = round(total_requests / max(len(flushes), 1), 1)
    lag = doc["lag"]["ticks"]
    log(f"{mode}: lag p50 {lag.get('p50')} p99 {lag.get('p99')} max {lag.get('max')} ticks, "
        f"{doc['starvation']['starved']} starved, rows ok {check['rows_ok']}")
    return doc


def goals(phase: dict[str, Any]) -> dict[str, Any]:
    lag = phase["lag"]
    under = phase["load"]["busy_share_max"] < 1.0 and phase["late_ticks"] == 0
    fair = {c: f["max_over_min"] for c, f in lag["fairness"].items() if c != "idle"}
    from_flush = {c: f["plain_max_over_min"] for c, f in lag["fairness"].items() if c != "idle"}
    idle = phase["requests"]["per_table_per_tick"].get("idle", {})
    return {
        "under_capacity": under,
        "p99_lag_ticks": lag["ticks"].get("p99"), "p99_met": (lag["ticks"].get("p99") or 0) <= GOAL_P99_TICKS,
        "fairness_max_over_min": fair,
        "fairness_met": all(v is not None and v <= GOAL_FAIRNESS for v in fair.values()),
        "fairness_from_flush": from_flush,
        "fairness_from_flush_met": all(v is not None and v <= GOAL_FAIRNESS for v in from_flush.values()),
        "slo_breaches": phase["slo"]["breaches"], "slo_tables": phase["slo"]["tables"],
        "idle_requests_per_tick_max": idle.get("max"), "idle_requests_per_tick_mean": idle.get("mean"),
        "idle_met": idle.get("max", 0) <= GOAL_IDLE_REQUESTS,
        "starved": phase["starvation"]["starved"], "rows_ok": phase["check"]["rows_ok"],
    }


def main(argv: list[str] | None = None) -> int:
    p = parser("fleet sim", __doc__)
    p.add_argument("--tables", type=int, default=40)
    p.add_argument("--hot", type=int, default=6)
    p.add_argument("--idle", type=int, default=12)
    p.add_argument("--hot-rate", type=float, default=4.0, help="generations a tick of a hot table")
    p.add_argument("--cold-rate", type=float, default=0.5, help="generations a tick of a cold table")
    p.add_argument("--tick", type=float, default=8.0, help="seconds")
    p.add_argument("--load-ticks", type=int, default=12)
    p.add_argument("--cooldown-ticks", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--every", type=int, default=4, help="the fixed schedule: a cycle every N ticks")
    p.add_argument("--starve-ticks", type=int, default=3, help="starved: unmerged data not served for N ticks")
    p.add_argument("--phases", default="fleet,fixed", help="fleet (a round a tick: service level first, then debt), "
                   "fleet-debt (by debt alone), fleet-events (woken by each flush, every table every --every ticks), "
                   "fixed (every table's cycle every --every ticks)")
    p.add_argument("--writer-start-seconds", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=1)
    cfg = p.parse_args(argv)
    if cfg.hot + cfg.idle > cfg.tables:
        p.error("--hot + --idle must not exceed --tables")
    with Run("fleet", "a fleet under live writers: the fleet runner against a fixed schedule", out=cfg.out,
             work=cfg.work, config={k: v for k, v in vars(cfg).items() if k not in ("work", "out")},
             policy=policy_doc(cfg.tick, cfg.every), phases={}) as bench:
        work, doc = bench.work, bench.doc
        names = build_pristine(work / "pristine", cfg.tables)
        for mode in cfg.phases.split(","):
            doc["phases"][mode] = run_phase(mode, cfg, work / "pristine", names, work)
            doc["phases"][mode]["goals"] = goals(doc["phases"][mode])
        bench.publish(draw=chart, summary=summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
