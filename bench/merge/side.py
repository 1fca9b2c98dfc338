"""The merge benchmark's side comparisons: the same table merged with and without merge
operators, and 10,000 tiny generations (each a point of bench.json)."""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.data.tables import copy_table
from bench.harness.results import log
from bench.harness.stats import summarize
from bench.merge.compare import run_contender
from bench.merge.report import TARGET_TINY_SECONDS


def ops_point(pristine: str, repeat: int, work: Path, logs: Path) -> dict:
    """The main table merged with ``value`` summed and with it replaced (:func:`bench.merge.ops.compare_ops`)."""
    from bench.merge.ops import compare_ops

    point, tables = compare_ops(pristine, repeat, work, logs, "ops")
    for src in tables.values():
        shutil.rmtree(src, ignore_errors=True)
    return {"column": "value", "operator": "sum", **point}


def tiny_point(generations: int, repeat: int, work: Path, logs: Path) -> dict:
    """``memwal merge`` of ``generations`` tiny generations, as a whole process."""
    from bench.data.tiny import build_tiny

    pristine = str(work / "tiny-table")
    log(f"tiny generations: writing {generations:,} generations with ShardWriter")
    info = build_tiny(pristine, generations)
    runs = []
    for r in range(repeat):
        copy = copy_table(pristine, str(work / f"tiny-{r}"))
        log(f"tiny generations: ours (run {r + 1}/{repeat})")
        doc = run_contender("ours", copy, logs, f"tiny-{r}")
        doc["identical"] = doc["generations"] == generations
        runs.append(doc)
        shutil.rmtree(copy, ignore_errors=True)
    shutil.rmtree(pristine, ignore_errors=True)
    out = summarize(runs)
    return {"table": info, **out, "all_merged": out["identical"], "target_seconds_max": TARGET_TINY_SECONDS,
            "met": out["inner_seconds"] < TARGET_TINY_SECONDS}
