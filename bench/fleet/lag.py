"""The fleet simulation's figures, from its logs: lag, fairness, starvation, GC backlog, requests, load.

Pure functions over what a phase of :mod:`bench.fleet.sim` recorded:

- flushes: ``{"table", "shard", "generation", "flushed_at"}`` (the writers' log);
- merges: ``{"table", "shard", "from", "to", "at"}``: each merge commit, ``at`` the time of the
  table version it made (the version's own timestamp);
- samples: at each tick's start, the generation numbers each shard holds on storage;
- requests: per tick, the requests each table cost (:mod:`bench.fleet.count`);
- cycles: per table run, when it started and how long it took.

A generation's lag is its merge commit's time minus its flush time. A generation never merged
by the end counts with its age at the end, as a lower bound (``censored``): a table the runner
starves shows in the figures instead of dropping out of them. Ticks are counted from the start
of the load; ``tick k`` spans ``[t0 + k * tick, t0 + (k + 1) * tick)``.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from bench.harness.stats import quantiles


def merged_at(flushes: list[dict[str, Any]], merges: list[dict[str, Any]]) -> list[float | None]:
    """For each flush, the first merge commit that covered its generation (None: never)."""
    by_shard: dict[tuple[str, str], list[tuple[float, int, int]]] = defaultdict(list)
    for m in merges:
        by_shard[(m["table"], m["shard"])].append((m["at"], m["from"], m["to"]))
    out: list[float | None] = []
    for f in flushes:
        hits = [at for at, lo, hi in by_shard.get((f["table"], f["shard"]), ()) if lo <= f["generation"] <= hi]
        out.append(min(hits) if hits else None)
    return out


def lag_figures(flushes: list[dict[str, Any]], merges: list[dict[str, Any]], *, t0: float, end: float, tick: float,
                classes: Mapping[str, str]) -> dict[str, Any]:
    """Lag quantiles (seconds and ticks), overall and by class, and the fairness within each class.

    Fairness compares the tables of a class by their mean lag counted from the start of the tick
    in which each flush happened: where in a tick a writer happened to flush (uniform over the
    tick, a few samples a table) is no runner's doing, and would swamp the comparison. The
    plain mean lag's ratio is reported beside it (``plain_max_over_min``)."""
    done = merged_at(flushes, merges)
    rows = []
    for f, m in zip(flushes, done, strict=True):
        finished = m if m is not None else end
        tick_start = t0 + ((f["flushed_at"] - t0) // tick) * tick
        rows.append((f, finished - f["flushed_at"], finished - tick_start, m is None))
    per_table: dict[str, list[tuple[float, float]]] = defaultdict(list)
    per_class: dict[str, list[float]] = defaultdict(list)
    for f, lag, from_tick, _ in rows:
        per_table[f["table"]].append((lag, from_tick))
        per_class[classes[f["table"]]].append(lag)
    fairness = {}
    for cls in sorted(set(classes.values())):
        tables = {t: v for t, v in per_table.items() if classes[t] == cls}
        if len(tables) < 2:
            continue
        aligned = [statistics.fmean(x for _, x in v) / tick for v in tables.values()]
        plain = [statistics.fmean(x for x, _ in v) / tick for v in tables.values()]
        fairness[cls] = {"tables": len(tables), "mean_lag_ticks_min": round(min(aligned), 3),
                         "mean_lag_ticks_max": round(max(aligned), 3),
                         "max_over_min": round(max(aligned) / min(aligned), 2) if min(aligned) > 0 else None,
                         "plain_max_over_min": round(max(plain) / min(plain), 2) if min(plain) > 0 else None}
    seconds = [lag for _, lag, _, _ in rows]
    return {
        "generations": len(rows), "censored": sum(1 for *_, c in rows if c),
        "seconds": quantiles(seconds), "ticks": quantiles(s / tick for s in seconds),
        "by_class_ticks": {c: quantiles(s / tick for s in v) for c, v in sorted(per_class.items())},
        "per_table_mean_ticks": {t: round(statistics.fmean(x for _, x in v) / tick, 3)
                                 for t, v in sorted(per_table.items())},
        "fairness": fairness,
    }


def starvation(flushes: list[dict[str, Any]], merges: list[dict[str, Any]], *, t0: float, tick: float, ticks: int,
               tables: Iterable[str], n: int) -> dict[str, Any]:
    """Per table, the longest run of ticks that began with unmerged data and saw no merge of it;
    a table whose run reached ``n`` ticks is starved."""
    done = merged_at(flushes, merges)
    pending: dict[str, list[tuple[float, float]]] = defaultdict(list)  # table -> (flushed, merged or inf)
    for f, m in zip(flushes, done, strict=True):
        pending[f["table"]].append((f["flushed_at"], m if m is not None else float("inf")))
    served: dict[str, set[int]] = defaultdict(set)
    for m in merges:
        served[m["table"]].add(int((m["at"] - t0) // tick))
    longest: dict[str, int] = {}
    for table in tables:
        run = best = 0
        for k in range(ticks):
            start = t0 + k * tick
            owed = any(f < start < m for f, m in pending.get(table, ()))
            run = run + 1 if owed and k not in served[table] else 0
            best = max(best, run)
        longest[table] = best
    starved = sorted(t for t, r in longest.items() if r >= n)
    return {"threshold_ticks": n, "starved": len(starved), "starved_tables": starved,
            "longest_unserved_ticks": max(longest.values(), default=0), "per_table": longest}


def breaches(flushes: list[dict[str, Any]], merges: list[dict[str, Any]], *, t0: float, tick: float, ticks: int,
             tables: Iterable[str], target: float, classes: Mapping[str, str]) -> dict[str, Any]:
    """Service-level breaches at each tick's start: a table whose oldest unmerged generation is
    older than ``target`` seconds. The same count for every phase, from the logs alone."""
    done = merged_at(flushes, merges)
    pending: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for f, m in zip(flushes, done, strict=True):
        pending[f["table"]].append((f["flushed_at"], m if m is not None else float("inf")))
    per_tick, per_table = [], defaultdict(int)
    for k in range(ticks):
        start = t0 + k * tick
        breaching = [t for t in tables if any(f < start < m and start - f > target for f, m in pending.get(t, ()))]
        per_tick.append(len(breaching))
        for t in breaching:
            per_table[t] += 1
    by_class: dict[str, int] = defaultdict(int)
    for t, n in per_table.items():
        by_class[classes[t]] += n
    return {"target_seconds": target, "breaches": sum(per_tick), "tables": len(per_table),
            "max_per_tick": max(per_tick, default=0), "per_tick": per_tick, "by_class": dict(by_class)}


def gc_backlog(samples: list[dict[str, Any]], merges: list[dict[str, Any]], *, t0: float,
               tick: float) -> dict[str, Any]:
    """Per sample, the merged generations still on storage (GC's backlog) and the unmerged ones."""
    series = []
    for s in samples:
        merged: dict[tuple[str, str], int] = defaultdict(int)
        for m in merges:
            if m["at"] <= s["at"]:
                key = (m["table"], m["shard"])
                merged[key] = max(merged[key], m["to"])
        backlog = unmerged = 0
        for table, shards in s["generations"].items():
            for shard, gens in shards.items():
                done = merged[(table, shard)]
                backlog += sum(1 for g in gens if g <= done)
                unmerged += sum(1 for g in gens if g > done)
        series.append({"tick": round((s["at"] - t0) / tick, 2), "merged_on_storage": backlog,
                       "unmerged_on_storage": unmerged})
    values = [p["merged_on_storage"] for p in series]
    total = [p["merged_on_storage"] + p["unmerged_on_storage"] for p in series]
    return {"series": series, "max": max(values, default=0),
            "mean": round(statistics.fmean(values), 1) if values else 0, "last": values[-1] if values else 0,
            "on_storage_max": max(total, default=0),
            "on_storage_mean": round(statistics.fmean(total), 1) if total else 0}


def request_figures(per_tick: list[Mapping[str, int]], classes: Mapping[str, str]) -> dict[str, Any]:
    """Requests per table per tick: by class (mean and max over tables and ticks), and shared."""
    by_class: dict[str, list[int]] = defaultdict(list)
    for counts in per_tick:
        for table, cls in classes.items():
            by_class[cls].append(counts.get(table, 0))
    shared = [counts.get("shared", 0) for counts in per_tick]
    out = {cls: {"mean": round(statistics.fmean(v), 2), "max": max(v)} for cls, v in sorted(by_class.items())}
    return {"per_table_per_tick": out, "shared_per_tick": {"mean": round(statistics.fmean(shared), 2) if shared else 0,
                                                           "max": max(shared, default=0)},
            "shared_per_table_per_tick": round(statistics.fmean(shared) / max(len(classes), 1), 3) if shared else 0,
            "series": [{"tick": k, **{cls: sum(c.get(t, 0) for t in classes if classes[t] == cls)
                                      for cls in sorted(set(classes.values()))}, "shared": c.get("shared", 0)}
                       for k, c in enumerate(per_tick)]}


def load_figures(cycles: list[dict[str, Any]], *, t0: float, tick: float, ticks: int, workers: int) -> dict[str, Any]:
    """How busy the workers were: seconds of table runs per tick against ``workers`` x the tick."""
    busy = [0.0] * ticks
    for c in cycles:
        k = int((c["started_at"] - t0) // tick)
        if 0 <= k < ticks:
            busy[k] += c["seconds"]
    share = [b / (workers * tick) for b in busy]
    return {"table_runs": len(cycles), "busy_share_per_tick": [round(s, 3) for s in share],
            "busy_share_mean": round(statistics.fmean(share), 3) if share else 0.0,
            "busy_share_max": round(max(share, default=0.0), 3),
            "seconds_per_table_run": quantiles(c["seconds"] for c in cycles)}
