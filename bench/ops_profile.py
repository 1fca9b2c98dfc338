"""Merge operators against the same merge without them: ``python -m bench.ops_profile --out DIR``.

Issue 23's goal: a merge whose table declares a merge operator (``value`` summed) within 1.5x
of the same merge without one, in-process. Per base size (``--sizes``, default 1M and 4M rows,
the ~200,000-row change set of :mod:`bench.growth_tables`), two copies of one pristine table
differ only in one ``update_config`` commit (``memwal.merge-op.value`` = ``sum`` or
``replace``, which folds nothing); ``memwal merge`` runs on fresh copies of each, interleaved,
as whole processes (:mod:`bench.workers`: ``inner_seconds`` is the in-process time after
imports). Then one run of each under :mod:`bench.timers` shows where the extra time goes
(reading the WAL operands, the base rows a fold starts from, the fold itself).

Writes ``DIR/ops_profile.json``. Figures only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.growth import copy_fresh, timed_profile
from bench.growth_tables import GrowthSpec, build_growth_table
from bench.harness import log, run_worker, set_merge_op, table_state

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


def one_size(n: int, change: int, repeat: int, work: Path, logs: Path) -> dict:
    pristine = str(work / f"ops-{n}")
    info = build_growth_table(pristine, GrowthSpec(base_rows=n, change_rows=change))
    tables = {}
    for name, op in (("plain", "replace"), ("ops", "sum")):
        tables[name] = copy_fresh(pristine, work / f"ops-{n}-{name}")
        set_merge_op(tables[name], op)
    shutil.rmtree(pristine, ignore_errors=True)
    runs: dict[str, list[dict]] = {"plain": [], "ops": []}
    for r in range(repeat):
        for name, src in tables.items():
            copy = copy_fresh(src, work / f"ops-{n}-{name}-run")
            log(f"ops {n:,}: {name} (run {r + 1}/{repeat})")
            doc = run_worker("ours", copy, logs, f"ops-{n}-{name}-{r}")
            doc["progress"] = table_state(copy)[1]
            runs[name].append(doc)
            shutil.rmtree(copy, ignore_errors=True)
    point: dict = {"base_rows": n, "table": info}
    for name, docs in runs.items():
        point[name] = {k: statistics.median(d[k] for d in docs) for k in ("whole_seconds", "inner_seconds",
                                                                         "peak_rss_mb")}
        point[name]["runs"] = [{k: round(d[k], 3) for k in ("whole_seconds", "inner_seconds", "peak_rss_mb")}
                               for d in docs]
    point["same_progress"] = runs["plain"][0]["progress"] == runs["ops"][0]["progress"]
    point["ops_over_plain_inner"] = round(point["ops"]["inner_seconds"] / point["plain"]["inner_seconds"], 3)
    point["ops_over_plain_whole"] = round(point["ops"]["whole_seconds"] / point["plain"]["whole_seconds"], 3)
    point["ops_over_plain_peak_rss"] = round(point["ops"]["peak_rss_mb"] / point["plain"]["peak_rss_mb"], 3)
    point["met"] = point["ops_over_plain_inner"] <= TARGET
    point["timers"] = {}
    for name, src in tables.items():
        log(f"ops {n:,}: {name} under bench.timers")
        prof = timed_profile(src, work, logs, f"ops-{n}-{name}")
        point["timers"][name] = {"seconds": prof.get("seconds"), "missing": prof.get("missing"),
                                 "functions": {k: v for k, v in prof.get("functions", {}).items()
                                               if k in KEY_FUNCTIONS}}
    for src in tables.values():
        shutil.rmtree(src, ignore_errors=True)
    log(f"ops {n:,}: ops/plain {point['ops_over_plain_inner']:.2f}x in-process "
        f"({point['ops']['inner_seconds']:.2f}s / {point['plain']['inner_seconds']:.2f}s)")
    return point


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ops_profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--sizes", default="1000000,4000000", help="base rows, comma-separated")
    p.add_argument("--change-rows", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=5, help="interleaved runs of each (medians)")
    p.add_argument("--smoke", action="store_true", help="tiny tables (checks the harness)")
    p.add_argument("--workdir")
    args = p.parse_args(argv)
    if args.smoke:
        args.sizes, args.change_rows, args.repeat = "20000", 2000, 1
    out = Path(args.out).resolve()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    work = Path(args.workdir).resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="memwal-ops-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    doc: dict = {"benchmark": "memwal merge with a merge operator (value=sum) against without",
                 "change_rows": args.change_rows, "repeat": args.repeat, "target_max": TARGET, "points": []}
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            doc["points"].append(one_size(n, args.change_rows, args.repeat, work, logs))
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    doc["total_seconds"] = round(time.perf_counter() - t0, 1)
    (out / "ops_profile.json").write_text(json.dumps(doc, indent=1) + "\n")
    for pt in doc["points"]:
        print(f"merge operators, {pt['base_rows']:,} base rows: ops/plain {pt['ops_over_plain_inner']:.2f}x "
              f"in-process, {pt['ops_over_plain_whole']:.2f}x whole, {pt['ops_over_plain_peak_rss']:.2f}x peak RSS "
              f"(target <= {TARGET}: {'met' if pt['met'] else 'MISSED'})", file=sys.stderr)
    print(f"wrote {out / 'ops_profile.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
