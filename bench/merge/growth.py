"""Merge cost as the base grows: ``python -m bench merge growth --out DIR [--full | --smoke]``.

The same change set (about 200,000 change rows: 4 shards x 35 generations written by
``ShardWriter``, see :mod:`bench.data.growth`) is merged into bases of 1M, 4M and 16M rows
(64M with ``--full``) carrying a BTREE on the key. At each size, on fresh copies of one
pristine table, interleaved, as whole processes (:mod:`bench.merge.contenders`):

* ``ours``: ``memwal merge TABLE --json`` (local engine);
* ``floor``: one read of every generation, one dedupe, one delete ``merge_insert`` and one
  marked upsert ``merge_insert`` (Lance's defaults);
* ``floor-scan``: the same floor with ``MergeInsertBuilder.use_index(False)`` on both passes
  (a scan join; Lance's default, ``floor``, joins through the key index);
* ``floor-sorted``: the floor (Lance's defaults) with both passes' rows sorted by key.

The goal compares ``ours`` with the *best* floor at each size (the fastest of the three, by
median whole-process time): the fastest honest single pass, whichever join it used.

Every resulting table must equal ``ours``'s (an order-independent digest of every row, and
the same merge progress), or the run fails. Time and peak RSS are medians. Then, per size:

* one more ``ours`` run under :mod:`bench.harness.timers` (seconds per core function: what of the
  merge grows with the base);
* an in-process sweep of Lance's ``merge_insert`` (``execute_uncommitted``, so the table does
  not move) with and without the key index for change sets of 100 to 200,000 keys, rows in
  the merge's order (random keys) and sorted by key: where the index starts or stops paying.

Writes ``DIR/growth.json`` and ``DIR/growth.png``. Figures only, never assertions.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from bench.data.growth import GrowthSpec, build_growth_table
from bench.data.tables import copy_table
from bench.harness.processes import BenchFailed, timers
from bench.harness.results import Run, figure, log, parser
from bench.merge.compare import run_contender

CONTENDERS = ("ours", "floor", "floor-scan", "floor-sorted")
FLOORS = CONTENDERS[1:]
TARGET_OURS_OVER_FLOOR = 1.2
TARGET_RSS_OVER_FLOOR = 1.2
SWEEP_KEYS = (100, 300, 1_000, 3_000, 10_000, 50_000, 200_000)


# --------------------------------------------------------------------------- verification


def table_digest(path: str) -> dict:
    """An order-independent digest of every row (sum and xor of 64-bit row hashes), the row
    count and the merge progress: equal digests mean equal tables, whatever the fragment order."""
    import lance
    import pandas as pd
    import pyarrow as pa

    from memwal.table import open_table

    total = np.uint64(0)
    xor = np.uint64(0)
    rows = 0
    primes = [np.uint64(p) for p in (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5)]
    with np.errstate(over="ignore"):
        for batch in lance.dataset(path).to_batches(batch_size=1 << 20):
            n = batch.num_rows
            h = np.zeros(n, dtype=np.uint64)
            for i, name in enumerate(batch.schema.names):
                col = batch.column(name)
                if pa.types.is_fixed_size_list(col.type):
                    flat = col.flatten().to_numpy(zero_copy_only=False)
                    width = col.type.list_size * flat.itemsize
                    raw = np.frombuffer(flat.tobytes(), dtype=np.uint8).reshape(n, width)
                    words = raw.view(np.uint64) if width % 8 == 0 else raw.astype(np.uint64)
                    ch = np.zeros(n, dtype=np.uint64)
                    for j in range(words.shape[1]):
                        ch = ch * primes[j % 4] + pd.util.hash_array(np.ascontiguousarray(words[:, j]))
                elif pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
                    ch = pd.util.hash_array(col.to_numpy(zero_copy_only=False).astype(object))
                else:
                    ch = pd.util.hash_array(col.to_numpy(zero_copy_only=False))
                h ^= ch * primes[i % 4] + np.uint64(i)
            total = total + np.sum(h, dtype=np.uint64)
            xor ^= np.bitwise_xor.reduce(h) if n else np.uint64(0)
            rows += n
    progress = dict(open_table(path).manifest().compacted)
    return {"rows": rows, "sum": int(total), "xor": int(xor), "progress": progress}


# --------------------------------------------------------------------------- one size


def copy_fresh(src: str, dst: Path) -> str:
    """A fresh copy, written back to disk before a timed run (:func:`bench.data.tables.copy_table`)."""
    return copy_table(src, dst, sync=True)


def timed_profile(pristine: str, work: Path, logs: Path, label: str) -> dict:
    """One ``memwal merge`` under :mod:`bench.harness.timers` (a whole process, its own copy)."""
    copy = copy_fresh(pristine, work / f"{label}-timers")
    doc = timers(["merge", copy, "--json"], "merge", logs / f"{label}-timers.json")
    shutil.rmtree(copy, ignore_errors=True)
    return doc


def index_sweep(pristine: str, work: Path, keys: tuple[int, ...], repeat: int) -> dict:
    """Lance's ``merge_insert`` with ``use_index(True)`` against ``use_index(False)``, in this
    process, for change sets of ``keys`` keys taken from the table's own net changes (half
    updates of base keys, half new keys, as the generations hold), upsert and delete passes,
    through ``execute_uncommitted`` so every call sees the same table. Medians of ``repeat``
    interleaved calls after one warm-up call of each."""
    import lance
    import pyarrow as pa
    import pyarrow.compute as pc

    from bench.merge.contenders import _dedupe, _generation_dirs, _primary_key

    copy = copy_fresh(pristine, work / "sweep")
    ds = lance.dataset(copy)
    schema = ds.schema
    pk = _primary_key(ds)
    parts = []
    for refs in _generation_dirs(copy).values():
        for g, uri in refs:
            t = lance.dataset(uri).scanner(with_row_address=True).to_table()
            parts.append(t.append_column("__gen", pa.array(np.full(t.num_rows, g, dtype=np.int64))))
    net = _dedupe(pa.concat_tables(parts), pk, ["__gen", "_rowaddr"])
    tomb = net.column("_tombstone")
    upserts = net.filter(pc.invert(tomb)).select(schema.names).cast(schema)
    deletes = net.filter(tomb).select(pk)
    rng = np.random.default_rng(5)
    out: dict = {"base_rows": ds.count_rows(), "points": []}
    for k in keys:
        n_up = min(k, upserts.num_rows)
        n_del = min(max(1, k // 10), deletes.num_rows)
        # the merge's order (LSM: random keys), and the same rows sorted by key
        up = upserts.take(pa.array(np.sort(rng.choice(upserts.num_rows, n_up, replace=False))))
        dl = deletes.take(pa.array(np.sort(rng.choice(deletes.num_rows, n_del, replace=False))))
        rows = {"": (up, dl), "_sorted": (up.sort_by([(k, "ascending") for k in pk]),
                                          dl.sort_by([(k, "ascending") for k in pk]))}
        rows = {k: (pa.Table.from_batches(u.combine_chunks().to_batches(max_chunksize=8192)), d)
                for k, (u, d) in rows.items()}
        modes = ("index", "scan", "index_sorted")
        times: dict[str, list[float]] = {f"{p}_{m}": [] for p in ("upsert", "delete") for m in modes}
        for r in range(repeat + 1):
            for mode in modes:
                use = mode.startswith("index")
                u, d = rows["_sorted" if mode.endswith("sorted") else ""]
                t0 = time.perf_counter()
                (ds.merge_insert(pk).use_index(use).when_matched_update_all().when_not_matched_insert_all()
                 .execute_uncommitted(u))
                t1 = time.perf_counter()
                ds.merge_insert(pk).use_index(use).when_matched_delete().execute_uncommitted(d)
                t2 = time.perf_counter()
                if r:  # the first round warms caches
                    times[f"upsert_{mode}"].append(t1 - t0)
                    times[f"delete_{mode}"].append(t2 - t1)
        point = {"upsert_keys": n_up, "delete_keys": n_del,
                 **{k2: round(statistics.median(v), 4) for k2, v in times.items()}}
        for pas in ("upsert", "delete"):
            point[f"{pas}_index_over_scan"] = round(point[f"{pas}_index"] / point[f"{pas}_scan"], 2)
            point[f"{pas}_index_sorted_over_scan"] = round(point[f"{pas}_index_sorted"] / point[f"{pas}_scan"], 2)
        log(f"sweep {out['base_rows']:,} base rows, {n_up:,} upsert keys: index {point['upsert_index']:.3f}s "
            f"(sorted {point['upsert_index_sorted']:.3f}s) scan {point['upsert_scan']:.3f}s; {n_del:,} delete "
            f"keys: index {point['delete_index']:.3f}s (sorted {point['delete_index_sorted']:.3f}s) "
            f"scan {point['delete_scan']:.3f}s")
        out["points"].append(point)
    shutil.rmtree(copy, ignore_errors=True)
    return out


def one_size(spec: GrowthSpec, repeat: int, work: Path, logs: Path, *, sweep: tuple[int, ...], profile: bool) -> dict:
    label = f"base{spec.base_rows}"
    pristine = str(work / f"{label}-table")
    log(f"{label}: building {spec.base_rows:,} base rows and ~{spec.change_rows:,} change rows")
    info = build_growth_table(pristine, spec)
    runs: dict[str, list[dict]] = {c: [] for c in CONTENDERS}
    reference = None
    for r in range(repeat):
        for c in CONTENDERS:  # ours first: the reference
            copy = copy_fresh(pristine, work / f"{label}-{c}")
            log(f"{label}: {c} (run {r + 1}/{repeat})")
            doc = run_contender(c, copy, logs, f"{label}-{c}-{r}")
            digest = table_digest(copy)
            if reference is None:
                reference = digest
            doc["identical"] = digest == reference
            if not doc["identical"]:
                raise BenchFailed(f"{label}: {c} produced another table than ours ({digest} != {reference})")
            log(f"{label}: {c} whole {doc['whole_seconds']:.2f}s inner {doc['inner_seconds']:.2f}s "
                f"peak {doc['peak_rss_mb']:.0f} MiB")
            runs[c].append(doc)
            shutil.rmtree(copy, ignore_errors=True)
    point: dict = {"base_rows": spec.base_rows, "table": info, "rows_after": reference["rows"] if reference else None}
    for c, docs in runs.items():
        point[c] = {
            "whole_seconds": statistics.median(d["whole_seconds"] for d in docs),
            "inner_seconds": statistics.median(d["inner_seconds"] for d in docs),
            "peak_rss_mb": statistics.median(d["peak_rss_mb"] for d in docs),
            "runs": [{k: round(d[k], 3) for k in ("whole_seconds", "inner_seconds", "peak_rss_mb")} for d in docs],
        }
        if "phases" in docs[0]:
            point[c]["phases"] = {k: round(statistics.median(d["phases"][k] for d in docs), 3)
                                  for k in docs[0]["phases"]}
    ratios = {}
    best = min(FLOORS, key=lambda c: point[c]["whole_seconds"])
    point["best_floor"] = best
    point["best-floor"] = point[best]
    for a, b in (("ours", "best-floor"), ("ours", "floor"), ("ours", "floor-scan"), ("floor", "floor-scan"),
                 ("floor-sorted", "floor-scan"), ("ours", "floor-sorted")):
        for key, suffix in (("whole_seconds", ""), ("inner_seconds", "_inner"), ("peak_rss_mb", "_peak_rss")):
            ratios[f"{a}_over_{b}{suffix}".replace("-", "_")] = round(point[a][key] / point[b][key], 3)
    point["ratios"] = ratios
    if profile:
        log(f"{label}: ours under bench.harness.timers")
        point["ours_timers"] = timed_profile(pristine, work, logs, label)
    if sweep:
        log(f"{label}: merge_insert with and without the key index")
        point["index_sweep"] = index_sweep(pristine, work, sweep, repeat)
    shutil.rmtree(pristine, ignore_errors=True)
    return point


# --------------------------------------------------------------------------- chart, summary


COLORS = {"ours": "#2471a3", "floor": "#8e44ad", "floor-scan": "#27ae60",
          "floor-sorted": "#d35400"}


def chart(doc: dict, path: Path) -> None:
    points = doc["points"]
    xs = [p["base_rows"] for p in points]
    swept = [p for p in points if p.get("index_sweep")]
    with figure(path, rows=1, cols=4 if swept else 3, size=(22 if swept else 16.5, 5.2)) as (fig, axes):
        for ax, key, ylabel in ((axes[0], "whole_seconds", "seconds (whole process, median)"),
                                (axes[1], "peak_rss_mb", "peak RSS MiB (whole process, median)")):
            for c in CONTENDERS:
                ax.plot(xs, [p[c][key] for p in points], marker="o", color=COLORS[c], label=c)
            ax.set_xscale("log")
            ax.set_xlabel("base rows (change set fixed)")
            ax.set_ylabel(ylabel)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        axes[0].set_title(f"memwal merge of ~{doc['change_rows']:,} change rows vs the floors\n"
                          "(floor: Lance's default join, through the key index)", fontsize=9)
        axes[1].set_title("peak memory", fontsize=9)
        ax = axes[2]
        for name, color in (("ours_over_best_floor", COLORS["ours"]), ("ours_over_floor", COLORS["floor"]),
                            ("ours_over_floor_scan", COLORS["floor-scan"]),
                            ("floor_over_floor_scan", "#7f8c8d")):
            ax.plot(xs, [p["ratios"][name] for p in points], marker="o", color=color, label=name.replace("_", " "))
        ax.axhline(TARGET_OURS_OVER_FLOOR, color="black", linestyle="--", linewidth=1, label="target 1.2")
        ax.set_xscale("log")
        ax.set_xlabel("base rows")
        ax.set_ylabel("ratio (whole process)")
        ax.set_title("ratios", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        if swept:
            _sweep_panel(axes[3], swept)


def _sweep_panel(ax, points: list[dict]) -> None:
    """Lance's key index against a scan join, per change-set size (``--no-sweep`` leaves it out)."""
    for p in points:
        sw = p["index_sweep"]
        ks = [q["upsert_keys"] for q in sw["points"]]
        line = ax.plot(ks, [q["upsert_index_over_scan"] for q in sw["points"]], marker="o",
                       label=f"{p['base_rows'] / 1e6:g}M base: upsert")[0]
        ax.plot(ks, [q["upsert_index_sorted_over_scan"] for q in sw["points"]], marker="s", linestyle=":",
                color=line.get_color(), label=f"{p['base_rows'] / 1e6:g}M base: upsert, rows sorted by key")
        ax.plot(ks, [q["delete_index_over_scan"] for q in sw["points"]], marker=".", linestyle="--",
                color=line.get_color(), alpha=0.6, label=f"{p['base_rows'] / 1e6:g}M base: delete (keys/10)")
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("keys in the change set")
    ax.set_ylabel("use_index(True) / use_index(False), seconds")
    ax.set_title("does the key index pay? (<1: yes)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def summary(doc: dict) -> str:
    lines = [f"merge growth ({doc['mode']}, {doc['machine']['cores']} cores): ~{doc['change_rows']:,} change rows, "
             "BTREE on the key; whole processes, medians"]
    lines.append(f"  {'base rows':>12} " + " ".join(f"{c:>18}" for c in CONTENDERS)
                 + "   ours/best-floor  ours/floor  ours/floor-scan  RSS ours/best")  # seconds, MiB
    for p in doc["points"]:
        r = p["ratios"]
        cells = " ".join(f"{p[c]['whole_seconds']:7.2f}s {p[c]['peak_rss_mb']:6.0f}MiB" for c in CONTENDERS)
        lines.append(f"  {p['base_rows']:>12,} {cells}   {r['ours_over_best_floor']:15.2f}"
                     f"  {r['ours_over_floor']:10.2f}  {r['ours_over_floor_scan']:15.2f}"
                     f"  {r['ours_over_best_floor_peak_rss']:13.2f}")
    for p in doc["points"]:
        for q in p.get("index_sweep", {}).get("points", []):
            lines.append(f"  sweep {p['base_rows']:>12,} base, {q['upsert_keys']:>7,} upserts: index/scan "
                         f"{q['upsert_index_over_scan']:.2f} ({q['upsert_index']:.3f}s/{q['upsert_scan']:.3f}s), "
                         f"sorted {q['upsert_index_sorted_over_scan']:.2f}; {q['delete_keys']:>6,} deletes: "
                         f"{q['delete_index_over_scan']:.2f}, sorted {q['delete_index_sorted_over_scan']:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = parser("merge growth", __doc__, smoke=True)
    p.add_argument("--full", action="store_true", help="add the 64M-row base (long)")
    p.add_argument("--sizes", help="comma-separated base rows (overrides the mode's)")
    p.add_argument("--repeat", type=int, help="runs per contender and size (default 3; smoke 1)")
    p.add_argument("--change-rows", type=int, help="change rows per table (default 200,000; smoke 2,000)")
    p.add_argument("--no-profile", action="store_true", help="skip the bench.harness.timers run of ours")
    p.add_argument("--no-sweep", action="store_true", help="skip the use_index sweep")
    args = p.parse_args(argv)
    if args.full and args.smoke:
        p.error("--full and --smoke exclude each other")

    mode, sizes, change, repeat, sweep = "default", [1_000_000, 4_000_000, 16_000_000], 200_000, 3, SWEEP_KEYS
    if args.smoke:
        mode, sizes, change, repeat, sweep = "smoke", [20_000, 80_000], 2_000, 1, (100, 1_000)
    elif args.full:
        mode, sizes = "full", [*sizes, 64_000_000]
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    change = args.change_rows or change
    repeat = args.repeat or repeat
    with Run("growth", "memwal merge against the floor as the base grows", out=args.out, work=args.work, mode=mode,
             change_rows=change, repeat=repeat, contenders=list(CONTENDERS),
             targets={"ours_over_floor_max": TARGET_OURS_OVER_FLOOR,
                      "ours_over_floor_peak_rss_max": TARGET_RSS_OVER_FLOOR},
             points=[], failures=[]) as run:
        doc = run.doc
        try:
            for n in sizes:
                spec = GrowthSpec(base_rows=n, change_rows=change)
                doc["points"].append(one_size(spec, repeat, run.work, run.logs, sweep=() if args.no_sweep else sweep,
                                              profile=not args.no_profile))
        except BenchFailed as exc:
            doc["failures"].append(str(exc))
            log(f"FAILED: {exc}")
        doc["ok"] = not doc["failures"]
        if doc["points"]:
            doc["met"] = all(p["ratios"]["ours_over_best_floor"] <= TARGET_OURS_OVER_FLOOR
                             and p["ratios"]["ours_over_best_floor_peak_rss"] <= TARGET_RSS_OVER_FLOOR
                             for p in doc["points"])
        run.publish(draw=chart if doc["points"] else None, summary=summary if doc["points"] else None)
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
