"""What the merge bench (:mod:`bench.merge.main`) writes besides its JSON: the profile of ours and the floor (where the
time goes, by the functions that matter), the chart and the text summary."""

from __future__ import annotations

import os
import pstats
import shutil
from pathlib import Path

from bench.data.tables import copy_table
from bench.harness.results import figure, log
from bench.merge.compare import run_contender

TARGET_LOOP_OVER_OURS = 10.0  # whole processes
TARGET_OURS_OVER_FLOOR = 1.1  # in-process (inner seconds)
TARGET_PEAK_RSS_OVER_FLOOR = 1.2
TARGET_TINY_SECONDS = 10.0

HOTSPOTS = [
    # (label, file suffix, function)
    ("ours: plan_merge", "memwal/merge/plan.py", "plan_merge"),
    ("ours: all_shard_manifests", "memwal/table/shards.py", "all_shard_manifests"),
    ("ours: generation_readable", "memwal/table/shards.py", "generation_readable"),
    ("ours: local_net_changes", "memwal/merge/local.py", "local_net_changes"),
    ("ours: read_generation", "memwal/merge/read.py", "read_generation"),
    ("ours: conform", "memwal/merge/read.py", "conform"),
    ("ours: newest_versions", "memwal/merge/changes.py", "newest_versions"),
    ("ours: commit_net_changes", "memwal/merge/execute.py", "commit_net_changes"),
    ("ours: guard_progress", "memwal/merge/guard.py", "guard_progress"),
    ("ours: table manifest reads", "memwal/table/manifest.py", "read_table_manifest"),
    ("ours: lease acquire", "memwal/lease/lease.py", "__enter__"),
    ("ours: lease release", "memwal/lease/lease.py", "__exit__"),
    ("ours: open_table", "memwal/table/handle.py", "open_table"),
    ("floor: _generations", "bench/merge/contenders.py", "_generations"),
    ("floor: _dedupe", "bench/merge/contenders.py", "_dedupe"),
    ("both: merge_insert execute", "lance/dataset.py", "execute"),
    ("both: lance.dataset()", "lance/__init__.py", "dataset"),
    ("both: scanner to_table", "lance/dataset.py", "to_table"),
]


def profile_summary(path: str, top: int = 25) -> tuple[dict, str]:
    """Cumulative seconds of the functions that matter, and a text report of the top ones."""
    stats = pstats.Stats(path)
    spots: dict[str, dict] = {}
    for (file, _line, func), (_cc, nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        for label, suffix, name in HOTSPOTS:
            if func == name and file.replace(os.sep, "/").endswith(suffix):
                cur = spots.setdefault(label, {"cumulative_seconds": 0.0, "calls": 0})
                cur["cumulative_seconds"] = max(cur["cumulative_seconds"], ct)
                cur["calls"] += nc
    total = max((v[3] for v in stats.stats.values()), default=0.0)  # type: ignore[attr-defined]
    import io

    buf = io.StringIO()
    pstats.Stats(path, stream=buf).sort_stats("cumulative").print_stats(top)
    return {"total_seconds": total, "functions": spots}, buf.getvalue()


def profile_pass(pristine: str, work: Path, logs: Path, out: Path) -> dict:
    result = {}
    for c in ("ours", "floor"):
        copy = copy_table(pristine, str(work / f"profile-{c}"))
        prof = str(out / f"profile-{c}.pstats")
        log(f"profile: {c} under cProfile")
        doc = run_contender(c, copy, logs, f"profile-{c}", profile=prof)
        summary, text = profile_summary(prof)
        (out / f"profile-{c}.txt").write_text(text)
        summary["inner_seconds"] = doc["inner_seconds"]
        if "phases" in doc:
            summary["phases"] = doc["phases"]
        result[c] = summary
        shutil.rmtree(copy, ignore_errors=True)
    return result


def chart(doc: dict, path: Path) -> None:
    colors = {"loop": "#c0392b", "ours": "#2471a3", "floor": "#7f8c8d", "spark": "#e67e22"}
    with figure(path, rows=1, cols=4, size=(22, 5.2)) as (fig, axes):
        ax = axes[0]
        cont = doc["contenders"]
        names = list(cont)
        whole = [cont[n]["whole_seconds"] for n in names]
        inner = [cont[n]["inner_seconds"] for n in names]
        x = range(len(names))
        ax.bar(x, whole, color=[colors.get(n, "#555") for n in names], label="whole process")
        ax.bar(x, inner, color="none", edgecolor="black", hatch="//", label="inner (after imports)")
        for i, w in enumerate(whole):
            ax.text(i, w, f"{w:.1f}s", ha="center", va="bottom", fontsize=9)
        ax.set_xticks(list(x), names)
        ax.set_ylabel("seconds (median)")
        ax.set_ylim(0, max(whole) * 1.3)
        t = doc["table"]
        r = doc["ratios"]
        title = (f"merge {t['change_rows']:,} change rows, {t['generations']} generations\n"
                 f"into {t['base_rows']:,} base rows")
        sub = []
        if "loop_over_ours" in r:
            sub.append(f"loop/ours {r['loop_over_ours']:.1f}x (target ≥{TARGET_LOOP_OVER_OURS:g})")
        if "ours_over_floor_inner" in r:
            sub.append(f"ours/floor {r['ours_over_floor_inner']:.2f}x in-process (target ≤{TARGET_OURS_OVER_FLOOR:g})")
        ax.set_title(title + "\n" + ", ".join(sub), fontsize=9)
        ax.legend(fontsize=8, loc="upper left")
        for ax, key, xlabel in (
            (axes[1], "change_rows", "change rows (base fixed)"),
            (axes[2], "base_rows", "base rows (change rows fixed)"),
        ):
            points = sorted(doc["growth"][key], key=lambda p: p[key])
            for c in ("ours", "floor", "spark"):
                xs = [p[key] for p in points if c in p]
                ys = [p[c]["whole_seconds"] for p in points if c in p]
                if xs:
                    ax.plot(xs, ys, marker="o", color=colors[c], label=f"{c} (whole process)")
                    yi = [p[c]["inner_seconds"] for p in points if c in p]
                    ax.plot(xs, yi, marker=".", linestyle="--", color=colors[c], alpha=0.6, label=f"{c} (inner)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("seconds")
            ax.set_title(f"growth with {key.replace('_', ' ')}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        targets_panel(axes[3], doc)


def targets_panel(ax, doc: dict) -> None:
    """Each measure divided by its target: a bar left of 1 meets it (for loop/ours, the
    inverse is drawn, so that smaller is better everywhere)."""
    r = doc.get("ratios", {})
    rows = []
    if "loop_over_ours" in r:
        rows.append(("ours/loop, whole (≤1/10)", TARGET_LOOP_OVER_OURS / r["loop_over_ours"]))
    if "ours_over_floor_inner" in r:
        rows.append(("ours/floor in-process (≤1.1)", r["ours_over_floor_inner"] / TARGET_OURS_OVER_FLOOR))
    if "ours_over_floor_peak_rss" in r:
        rows.append(("ours/floor peak RSS (≤1.2)", r["ours_over_floor_peak_rss"] / TARGET_PEAK_RSS_OVER_FLOOR))
    for p in doc.get("growth", {}).get("change_rows", []) + doc.get("growth", {}).get("base_rows", [])[1:]:
        if p.get("main_table") or "ours_over_floor_inner" not in p["ratios"]:
            continue
        rows.append((f"ours/floor {p['change_rows'] / 1e6:.1f}M chg {p['base_rows'] / 1e6:.1f}M base",
                     p["ratios"]["ours_over_floor_inner"] / TARGET_OURS_OVER_FLOOR))
    if "merge_ops" in doc:
        ops = doc["merge_ops"]
        rows.append(("merge ops / none (≤1.5)", ops["ops_over_plain_inner"] / ops["target_max"]))
    if "tiny_generations" in doc:
        t = doc["tiny_generations"]
        rows.append((f"{t['table']['generations']:,} tiny gens (<10 s)", t["inner_seconds"] / TARGET_TINY_SECONDS))
    names = [n for n, _ in rows]
    vals = [v for _, v in rows]
    ax.barh(range(len(rows)), vals, color=["#27ae60" if v <= 1 else "#c0392b" for v in vals])
    ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(rows)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("measure / target (≤ 1 meets it)")
    ax.set_title("targets", fontsize=9)


def summary_text(doc: dict) -> str:
    t = doc["table"]
    lines = [
        f"memwal merge benchmark ({doc['mode']}, {doc['machine']['cores']} cores, pylance {doc['machine']['pylance']})",
        f"  table: {t['base_rows']:,} base rows, {t['shards']} shards, {t['generations']} generations, "
        f"{t['change_rows']:,} change rows ({t['tombstone_rows']:,} tombstones), indexes={t['indexes']}",
    ]
    for name, c in doc["contenders"].items():
        extra = f", JVM+session start {c['spark_startup_seconds']:.1f}s" if "spark_startup_seconds" in c else ""
        lines.append(
            f"  {name:6s} whole {c['whole_seconds']:7.2f}s  inner {c['inner_seconds']:7.2f}s  "
            f"commits {c.get('commits', '?')}  identical={c['identical']}{extra}"
        )
    r, tg = doc["ratios"], doc["targets"]
    if "loop_over_ours" in r:
        lines.append(
            f"  loop/ours  {r['loop_over_ours']:.2f}x (target >= {tg['loop_over_ours_min']:g}: "
            f"{'met' if tg['loop_over_ours_met'] else 'MISSED'})"
        )
    if "ours_over_floor_inner" in r:
        lines.append(
            f"  ours/floor {r['ours_over_floor_inner']:.2f}x in-process (target <= {tg['ours_over_floor_max']:g}: "
            f"{'met' if tg['ours_over_floor_met'] else 'MISSED'}), {r['ours_over_floor']:.2f}x whole processes"
        )
    if "ours_over_floor_peak_rss" in r:
        lines.append(
            f"  ours/floor {r['ours_over_floor_peak_rss']:.2f}x peak RSS (target <= "
            f"{tg['ours_over_floor_peak_rss_max']:g}: {'met' if tg['ours_over_floor_peak_rss_met'] else 'MISSED'})"
        )
    if "spark_over_ours" in r:
        lines.append(f"  spark/ours {r['spark_over_ours']:.2f}x")
    for key in ("change_rows", "base_rows"):
        for p in sorted(doc["growth"][key], key=lambda p: p[key]):
            parts = [f"{c} {p[c]['inner_seconds']:.1f}s in-process"
                     + (f" {p[c]['peak_rss_mb']:.0f} MiB" if "peak_rss_mb" in p[c] else "")
                     for c in ("ours", "floor", "spark") if c in p]
            if "ours_over_floor_inner" in p["ratios"]:
                parts.append(f"ours/floor {p['ratios']['ours_over_floor_inner']:.2f}x"
                             + (f", RSS {p['ratios']['ours_over_floor_peak_rss']:.2f}x"
                                if "ours_over_floor_peak_rss" in p["ratios"] else ""))
            lines.append(
                f"  growth {key:11s} {p['change_rows']:>11,} change / {p['base_rows']:>11,} base: "
                + ", ".join(parts)
                + ("" if p["identical"] else "  NOT IDENTICAL")
                + "".join(f"; {c} FAILED: {why}" for c, why in p.get("failed", {}).items())
            )
    ops = doc.get("merge_ops")
    if ops:
        lines.append(f"  merge operators (value=sum) / none: {ops['ops_over_plain_inner']:.2f}x in-process "
                     f"(target <= {ops['target_max']:g}: {'met' if ops['met'] else 'MISSED'})")
    tiny = doc.get("tiny_generations")
    if tiny:
        lines.append(f"  {tiny['table']['generations']:,} tiny generations merged in {tiny['inner_seconds']:.1f}s "
                     f"in-process, {tiny['whole_seconds']:.1f}s whole (target < {tiny['target_seconds_max']:g}s: "
                     f"{'met' if tiny['met'] else 'MISSED'})")
    if doc["mode"] == "smoke":
        lines.append("  (smoke: tables far too small for the ratios to mean anything; this checks the harness)")
    lines.append(f"  identical tables: {doc['identical']}; total {doc['total_seconds']:.0f}s")
    return "\n".join(lines)
