"""The merge benchmark's side comparisons: the same table merged with and without merge
operators, 10,000 tiny generations, and the snapshot refresh (each a point of bench.json)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from bench.harness import (
    log,
    run_worker,
    set_merge_op,
    summarize,
    table_state,
)
from bench.report import (
    TARGET_OPS_OVER_PLAIN,
    TARGET_TINY_SECONDS,
)
from bench.tables import copy_table


def ops_point(pristine: str, repeat: int, work: Path, logs: Path) -> dict:
    """``memwal merge`` on the same table with ``value`` summed (operands read from the WAL,
    folded onto the base rows) and with it replaced (last write wins), interleaved."""
    tables = {}
    for name, op in (("plain", "replace"), ("ops", "sum")):
        tables[name] = copy_table(pristine, str(work / f"ops-{name}-table"))
        set_merge_op(tables[name], op)
    runs: dict[str, list[dict]] = {"plain": [], "ops": []}
    for r in range(repeat):
        for name, src in tables.items():
            copy = copy_table(src, str(work / f"ops-{name}-{r}"))
            log(f"merge operators: {name} (run {r + 1}/{repeat})")
            doc = run_worker("ours", copy, logs, f"ops-{name}-{r}")
            progress = table_state(copy)[1]
            doc["identical"] = not runs[name] or progress == runs[name][0]["progress"]
            doc["progress"] = progress
            runs[name].append(doc)
            shutil.rmtree(copy, ignore_errors=True)
    for src in tables.values():
        shutil.rmtree(src, ignore_errors=True)
    out = {name: summarize(v) for name, v in runs.items()}
    same_progress = out["plain"]["runs"][0]["progress"] == out["ops"]["runs"][0]["progress"]
    ratio = out["ops"]["inner_seconds"] / out["plain"]["inner_seconds"]
    return {
        "column": "value", "operator": "sum", **out,
        "ops_over_plain_inner": ratio,
        "ops_over_plain_whole": out["ops"]["whole_seconds"] / out["plain"]["whole_seconds"],
        "same_progress": same_progress,
        "target_max": TARGET_OPS_OVER_PLAIN, "met": ratio <= TARGET_OPS_OVER_PLAIN,
    }


def tiny_point(generations: int, repeat: int, work: Path, logs: Path) -> dict:
    """``memwal merge`` of ``generations`` tiny generations, as a whole process."""
    from bench.tiny import build_tiny

    pristine = str(work / "tiny-table")
    log(f"tiny generations: writing {generations:,} generations with ShardWriter")
    info = build_tiny(pristine, generations)
    runs = []
    for r in range(repeat):
        copy = copy_table(pristine, str(work / f"tiny-{r}"))
        log(f"tiny generations: ours (run {r + 1}/{repeat})")
        doc = run_worker("ours", copy, logs, f"tiny-{r}")
        doc["identical"] = doc["generations"] == generations
        runs.append(doc)
        shutil.rmtree(copy, ignore_errors=True)
    shutil.rmtree(pristine, ignore_errors=True)
    out = summarize(runs)
    return {"table": info, **out, "all_merged": out["identical"], "target_seconds_max": TARGET_TINY_SECONDS,
            "met": out["inner_seconds"] < TARGET_TINY_SECONDS}


def snapshot_refresh(work: Path, shards: int, *, spark: bool) -> dict:
    """``bench.snapshot_refresh.run`` when present (another module); ``spark=None`` lets it start Spark."""
    try:
        from bench.snapshot_refresh import run as snapshot_run
    except ImportError as exc:
        return {"skipped": f"bench.snapshot_refresh not available ({exc})"}
    log(f"snapshot refresh benchmark ({shards} shards)")
    # it may start Spark in this process: keep the console progress bar out of the summary
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.showConsoleProgress=false pyspark-shell")
    t0 = time.perf_counter()
    try:
        doc = snapshot_run(str(work / "snapshot_refresh"), shards=shards, spark=None if spark else False)
    except Exception as exc:  # noqa: BLE001 - another module's failure is recorded, not hidden
        return {"error": f"{type(exc).__name__}: {exc}", "seconds": time.perf_counter() - t0}
    return {"seconds": time.perf_counter() - t0, **(doc if isinstance(doc, dict) else {"result": doc})}
