"""The fleet benches' goals (issue 39), charts and text summaries: the simulation
(:mod:`bench.fleet.sim`) and the plan's cost (:mod:`bench.fleet.plan`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.harness.results import figure

#: ``memwal fleet plan`` over the largest fleet size, cold, in seconds.
GOAL_SECONDS = 10.0
#: Planning time per table at the largest size over the smallest: at most this (linear).
GOAL_LINEAR = 1.25
#: Requests an idle table costs a warm plan (and a fleet tick), at most.
GOAL_IDLE_REQUESTS = 4.0
#: The simulation's p99 merge lag, in ticks.
GOAL_P99_TICKS = 2.0
#: Within a class of tables, the most-lagged table's lag over the least-lagged's, at most.
GOAL_FAIRNESS = 2.0

COLORS = {"fleet": "#2471a3", "fleet-debt": "#7fb3d5", "fleet-events": "#27ae60", "fixed": "#c0392b"}
CLASSES = ("hot", "cold", "idle")


def _label(doc: dict[str, Any], mode: str) -> str:
    if mode == "fixed":
        return f"fixed schedule (every {doc['config']['every']} ticks)"
    return {"fleet-debt": "fleet runner, by debt alone", "fleet-events": "fleet runner woken by events"}.get(
        mode, "fleet runner")


def chart(doc: dict[str, Any], path: Path) -> None:
    phases = doc["phases"]
    with figure(path, rows=1, cols=5, size=(26, 5), dpi=100) as (fig, axes):
        width = 0.8 / max(len(phases), 1)

        ax = axes[0]
        for k, (mode, ph) in enumerate(phases.items()):
            by = ph["lag"]["by_class_ticks"]
            present = [c for c in CLASSES if by.get(c, {}).get("n")]
            xs = [CLASSES.index(c) + k * width for c in present]
            ax.bar(xs, [by[c]["p99"] for c in present], width=width, color=COLORS.get(mode), alpha=0.45,
                   label=f"{_label(doc, mode)}: p99")
            ax.bar(xs, [by[c]["p50"] for c in present], width=width, color=COLORS.get(mode), label="p50")
            ax.scatter(xs, [by[c]["max"] for c in present], color=COLORS.get(mode), marker="_", s=200, label="max")
        ax.axhline(GOAL_P99_TICKS, color="black", linestyle="--", linewidth=1, label=f"goal: p99 ≤ {GOAL_P99_TICKS:g}")
        ax.set_xticks([i + width * (len(phases) - 1) / 2 for i in range(2)], list(CLASSES[:2]))
        ax.set_ylabel("flush → merged lag (ticks)")
        ax.set_title(f"lag ({doc['config']['tick']:g} s ticks)", fontsize=9)
        ax.legend(fontsize=7)

        ax = axes[1]
        for i, (mode, ph) in enumerate(phases.items()):
            for k, cls in enumerate(c for c in CLASSES[:2]):
                vals = [v for t, v in ph["lag"]["per_table_mean_ticks"].items() if t.rsplit("/", 1)[-1] in
                        _names_of(ph, cls)]
                xs = [k - 0.2 + 0.4 * i / max(len(phases) - 1, 1)] * len(vals)
                ax.scatter(xs, vals, color=COLORS.get(mode), alpha=0.6, s=18,
                           label=_label(doc, mode) if k == 0 else None)
        ax.set_xticks([0, 1], list(CLASSES[:2]))
        ax.set_ylabel("mean lag of each table, from its flush's tick start (ticks)")
        ax.set_title("fairness within a class (goal: max ≤ 2 x min)", fontsize=9)
        ax.legend(fontsize=7)

        ax = axes[2]
        for mode, ph in phases.items():
            s = ph["gc_backlog"]["series"]
            ax.plot([p["tick"] for p in s], [p["merged_on_storage"] for p in s], color=COLORS.get(mode),
                    label=f"{_label(doc, mode)}: merged, on storage")
            ax.plot([p["tick"] for p in s], [p["unmerged_on_storage"] for p in s], color=COLORS.get(mode),
                    linestyle=":", label="unmerged")
        ax.axvline(doc["config"]["load_ticks"], color="grey", linewidth=0.8)
        ax.set_xlabel("tick (the writers stop at the grey line)")
        ax.set_ylabel("generations, all tables")
        ax.set_title("GC backlog", fontsize=9)
        ax.legend(fontsize=7)

        ax = axes[3]
        for k, (mode, ph) in enumerate(phases.items()):
            r = ph["requests"]["per_table_per_tick"]
            xs = [i + k * width for i, c in enumerate(CLASSES) if c in r]
            means = [r[c]["mean"] for c in CLASSES if c in r]
            maxes = [r[c]["max"] for c in CLASSES if c in r]
            ax.bar(xs, means, width=width, color=COLORS.get(mode), label=f"{_label(doc, mode)}: mean")
            ax.scatter(xs, maxes, color=COLORS.get(mode), marker="_", s=200, label="max")
            for x, m in zip(xs, means, strict=True):
                ax.text(x, m, f"{m:g}", ha="center", va="bottom", fontsize=7)
        ax.axhline(GOAL_IDLE_REQUESTS, color="black", linestyle="--", linewidth=1, label="goal: idle ≤ 4")
        ax.set_yscale("symlog")
        ax.set_xticks([i + width * (len(phases) - 1) / 2 for i in range(3)], list(CLASSES))
        ax.set_ylabel("store requests per table per tick")
        ax.set_title("requests (memwal's store layer; Lance's own I/O not counted)", fontsize=9)
        ax.legend(fontsize=7)

        ax = axes[4]
        for mode, ph in phases.items():
            share = ph["load"]["busy_share_per_tick"]
            ax.plot(range(len(share)), share, color=COLORS.get(mode), marker=".", label=_label(doc, mode))
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="capacity")
        ax.set_xlabel("tick")
        ax.set_ylabel(f"table-run seconds / ({doc['config']['workers']} workers x tick)")
        ax.set_title("how busy the budget was", fontsize=9)
        ax.legend(fontsize=7)


def _names_of(phase: dict[str, Any], cls: str) -> set[str]:
    return set(phase.get("class_of", {}).get(cls, ()))


def summary(doc: dict[str, Any]) -> str:
    c = doc["config"]
    lines = [f"fleet simulation: {c['tables']} tables ({c['hot']} hot at {c['hot_rate']:g} generations a tick, "
             f"{c['idle']} idle, the rest cold at {c['cold_rate']:g}), {c['load_ticks']} + {c['cooldown_ticks']} ticks "
             f"of {c['tick']:g}s, {c['workers']} workers"]
    for mode, ph in doc["phases"].items():
        g, lag = ph["goals"], ph["lag"]
        lines.append(f"  {_label(doc, mode)}: {lag['generations']} generations ({lag['censored']} never merged), lag "
                     f"p50 {lag['ticks'].get('p50')} p99 {lag['ticks'].get('p99')} max {lag['ticks'].get('max')} ticks"
                     f" (goal p99 <= 2: {'met' if g['p99_met'] else 'NOT MET'}; under capacity: {g['under_capacity']},"
                     f" busiest tick {ph['load']['busy_share_max']:.0%})")
        lines.append(f"    fairness (mean lag max/min in a class): {g['fairness_max_over_min']} "
                     f"({'met' if g['fairness_met'] else 'NOT MET'}); from the flush: {g['fairness_from_flush']} "
                     f"({'met' if g['fairness_from_flush_met'] else 'NOT MET'}); service level "
                     f"{ph['slo']['target_seconds']:g} s: {g['slo_breaches']} breaches (table x tick) of "
                     f"{g['slo_tables']} tables, by class {ph['slo']['by_class']}")
        lines.append(f"    starved tables: {g['starved']}; GC backlog mean "
                     f"{ph['gc_backlog']['mean']}, max {ph['gc_backlog']['max']} (all generations on storage: max "
                     f"{ph['gc_backlog']['on_storage_max']})")
        lines.append(f"    idle table requests per tick: mean {g['idle_requests_per_tick_mean']}, max "
                     f"{g['idle_requests_per_tick_max']} ({'met' if g['idle_met'] else 'NOT MET'}); rows after a final "
                     f"merge: {'ok' if g['rows_ok'] else 'WRONG'}; failed runs {ph['failed_runs']}")
    return "\n".join(lines)


def plan_chart(doc: dict[str, Any], path: Path) -> None:
    """The plan bench's chart: time against fleet size, per-table cost, requests on object stores."""
    with figure(path, rows=1, cols=3, size=(17, 4.8)) as (fig, axes):
        pts = doc["local"]["points"]
        xs = [p["tables"] for p in pts]
        ax = axes[0]
        for key, label, color in (("cli_cold_seconds", "memwal fleet plan (no cache)", "#2471a3"),
                                  ("cli_warm_seconds", "with a warm --cache", "#27ae60"),
                                  ("in_process_seconds", "discovery + plan in-process", "#7f8c8d")):
            ax.plot(xs, [p[key] for p in pts], marker="o", color=color, label=label)
        ax.axhline(GOAL_SECONDS, color="#c0392b", linestyle="--", linewidth=1, label=f"goal {GOAL_SECONDS:g} s")
        ax.set_xlabel("tables (local disk)")
        ax.set_ylabel("seconds (median)")
        ax.set_title("fleet plan, one process on 2 cores", fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        ax = axes[1]
        ax.bar([str(x) for x in xs], [p["ms_per_table_in_process"] for p in pts], color="#7f8c8d")
        ax.set_xlabel("tables")
        ax.set_ylabel("ms per table, in-process")
        ax.set_title(f"linearity: {doc['local']['largest_over_smallest_per_table']:.2f}x per table at {xs[-1]} vs "
                     f"{xs[0]} (goal ≤ {GOAL_LINEAR:g}x)", fontsize=9)
        ax = axes[2]
        scenarios = ("idle_cold", "idle_warm", "work_cold", "work_warm", "work_warm_after_a_flush",
                     "maintained_warm_after_a_flush")
        stores = [s for s in ("moto", "azurite") if isinstance(doc.get(s), dict) and "idle_warm" in doc[s]]
        width = 0.8 / max(len(stores), 1)
        for k, store in enumerate(stores):
            vals = [doc[store][s]["per_table"] for s in scenarios]
            ax.bar([i + k * width for i in range(len(scenarios))], vals, width=width, label=store,
                   color=["#e67e22", "#8e44ad"][k])
            for i, v in enumerate(vals):
                ax.text(i + k * width, v, f"{v:g}", ha="center", va="bottom", fontsize=7)
        ax.axhline(GOAL_IDLE_REQUESTS, color="#c0392b", linestyle="--", linewidth=1, label="goal: idle, warm ≤ 4")
        ax.set_xticks([i + width * (len(stores) - 1) / 2 for i in range(len(scenarios))],
                      [s.replace("_", "\n") for s in scenarios], fontsize=7)
        ax.set_ylabel("requests per table (counted at the server)")
        ax.set_title("fleet plan on object stores", fontsize=9)
        ax.legend(fontsize=8)


def plan_summary(doc: dict[str, Any]) -> str:
    loc = doc["local"]
    lines = [f"fleet plan: {doc['lake']['tables']} tables ({doc['lake']['files']:,} files), {doc['machine']['cores']} "
             "cores"]
    for p in loc["points"]:
        lines.append(f"  {p['tables']:>5} tables: CLI {p['cli_cold_seconds']:.2f}s cold, {p['cli_warm_seconds']:.2f}s "
                     f"warm cache; in-process {p['in_process_seconds']:.2f}s ({p['ms_per_table_in_process']:.2f} ms a "
                     f"table; discovery {p['discover_seconds']:.2f}s)")
    lines.append(f"  goal: {loc['points'][-1]['tables']} tables in <= {GOAL_SECONDS:g}s: "
                 f"{'met' if loc['goal_met'] else 'NOT MET'}; linear (<= {GOAL_LINEAR:g}x per table): "
                 f"{loc['largest_over_smallest_per_table']:.2f}x, {'met' if loc['linear_met'] else 'NOT MET'}")
    for store in ("moto", "azurite"):
        s = doc.get(store)
        if not isinstance(s, dict) or "idle_warm" not in s:
            lines.append(f"  {store}: {s}")
            continue
        parts = [f"{k.replace('_', ' ')} {s[k]['per_table']:g}" for k in
                 ("idle_cold", "idle_warm", "work_cold", "work_warm", "work_warm_after_a_flush",
                  "maintained_warm_after_a_flush")]
        lines.append(f"  {store} requests per table: " + ", ".join(parts)
                     + f" (idle, warm <= {GOAL_IDLE_REQUESTS:g}: {'met' if s['idle_goal_met'] else 'NOT MET'})")
        today = s["today_per_idle_table"]
        lines.append(f"    today's shape on an idle table: memwal status {today['status']['per_table']:g}, "
                     f"memwal cycle {today['cycle']['per_table']:g} requests")
    return "\n".join(lines)
