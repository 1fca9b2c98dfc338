"""Merge operators against the same merge without them: ``python -m bench merge ops --out DIR``.

Issue 23's goal: a merge whose table declares a merge operator (``value`` summed) within 1.5x
of the same merge without one, in-process. Per base size (``--sizes``, default 1M and 4M rows,
the ~200,000-row change set of :mod:`bench.data.growth`), two copies of one pristine table
differ only in one ``update_config`` commit (``memwal.merge-op.value`` = ``sum`` or
``replace``, which folds nothing); ``memwal merge`` runs on fresh copies of each, interleaved,
as whole processes (:mod:`bench.merge.contenders`: ``inner_seconds`` is the in-process time after
imports). Then one run of each under :mod:`bench.harness.timers` shows where the extra time goes
(reading the WAL operands, the base rows a fold starts from, the fold itself).

Writes ``DIR/ops_profile.json``. Figures only.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from bench.data.growth import GrowthSpec, build_growth_table
from bench.harness.results import Run, log, parser
from bench.harness.stats import ratio, summarize
from bench.merge.compare import run_contender, set_merge_op, table_state
from bench.merge.growth import copy_fresh, timed_profile

TARGET = 1.5
KEY_FUNCTIONS = (
    "memwal.merge.plan:plan_merge", "memwal.merge.plan:attach_operands", "memwal.merge.operands:wal_keys_by_generation",
    "memwal.merge.local:local_net_changes", "memwal.merge.read:read_generations",
    "memwal.merge.read:_scan_flushed", "memwal.merge.read:_decoded", "memwal.merge.read:_check_operands",
    "memwal.merge.operands:fetch_operands", "memwal.merge.operands:decode_operands",
    "memwal.merge.operands:check_complete",
    "memwal.merge.changes:reducer", "memwal.merge.changes:base_rows_for_fold", "memwal.merge.changes:fold_changes",
    "memwal.merge.changes:key_mask", "memwal.merge.fold:fold", "memwal.merge.changes:newest_versions",
    "memwal.merge.execute:commit_net_changes", "memwal.merge.execute:bound_delete_pass",
    "memwal.merge.execute:marked_pass",
)


def compare_ops(pristine: str, repeat: int, work: Path, logs: Path,
                label: str) -> tuple[dict[str, Any], dict[str, str]]:
    """``memwal merge`` on two copies of ``pristine`` that differ in one config commit, ``value``
    summed (operands read from the WAL, folded onto the base rows) or replaced (last write wins),
    interleaved, each run on a fresh copy: medians, ratios, whether both reached the same progress;
    and the two tables (the caller removes them)."""
    tables = {}
    for name, op in (("plain", "replace"), ("ops", "sum")):
        tables[name] = copy_fresh(pristine, work / f"{label}-{name}")
        set_merge_op(tables[name], op)
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "ops": []}
    for r in range(repeat):
        for name, src in tables.items():
            copy = copy_fresh(src, work / f"{label}-{name}-run")
            log(f"{label}: {name} (run {r + 1}/{repeat})")
            doc = run_contender("ours", copy, logs, f"{label}-{name}-{r}")
            doc["progress"] = table_state(copy)[1]
            doc["identical"] = not runs[name] or doc["progress"] == runs[name][0]["progress"]
            runs[name].append(doc)
            shutil.rmtree(copy, ignore_errors=True)
    out: dict[str, Any] = {name: summarize(v) for name, v in runs.items()}
    plain, ops = out["plain"], out["ops"]
    out.update(same_progress=runs["plain"][0]["progress"] == runs["ops"][0]["progress"],
               ops_over_plain_inner=ratio(ops["inner_seconds"], plain["inner_seconds"], 3),
               ops_over_plain_whole=ratio(ops["whole_seconds"], plain["whole_seconds"], 3),
               ops_over_plain_peak_rss=ratio(ops.get("peak_rss_mb"), plain.get("peak_rss_mb"), 3), target_max=TARGET)
    out["met"] = out["ops_over_plain_inner"] <= TARGET
    return out, tables


def one_size(n: int, change: int, repeat: int, work: Path, logs: Path) -> dict[str, Any]:
    pristine = str(work / f"ops-{n}")
    info = build_growth_table(pristine, GrowthSpec(base_rows=n, change_rows=change))
    point, tables = compare_ops(pristine, repeat, work, logs, f"ops-{n}")
    shutil.rmtree(pristine, ignore_errors=True)
    point = {"base_rows": n, "table": info, **point, "timers": {}}
    for name, src in tables.items():
        log(f"ops {n:,}: {name} under bench.harness.timers")
        prof = timed_profile(src, work, logs, f"ops-{n}-{name}")
        point["timers"][name] = {"seconds": prof.get("seconds"), "missing": prof.get("missing"),
                                 "functions": {k: v for k, v in prof.get("functions", {}).items()
                                               if k in KEY_FUNCTIONS}}
        shutil.rmtree(src, ignore_errors=True)
    log(f"ops {n:,}: ops/plain {point['ops_over_plain_inner']:.2f}x in-process "
        f"({point['ops']['inner_seconds']:.2f}s / {point['plain']['inner_seconds']:.2f}s)")
    return point


def summary(doc: dict[str, Any]) -> str:
    return "\n".join(f"merge operators, {pt['base_rows']:,} base rows: ops/plain {pt['ops_over_plain_inner']:.2f}x "
                     f"in-process, {pt['ops_over_plain_whole']:.2f}x whole, {pt['ops_over_plain_peak_rss']:.2f}x "
                     f"peak RSS (target <= {TARGET}: {'met' if pt['met'] else 'MISSED'})" for pt in doc["points"])


def main(argv: list[str] | None = None) -> int:
    p = parser("merge ops", __doc__, smoke=True)
    p.add_argument("--sizes", default="1000000,4000000", help="base rows, comma-separated")
    p.add_argument("--change-rows", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=5, help="interleaved runs of each (medians)")
    args = p.parse_args(argv)
    if args.smoke:
        args.sizes, args.change_rows, args.repeat = "20000", 2000, 1
    with Run("ops_profile", "memwal merge with a merge operator (value=sum) against without", out=args.out,
             work=args.work, change_rows=args.change_rows, repeat=args.repeat, target_max=TARGET, points=[]) as run:
        for n in (int(s) for s in args.sizes.split(",")):
            run.doc["points"].append(one_size(n, args.change_rows, args.repeat, run.work, run.logs))
        run.publish(summary=summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
