"""Where a whole ``memwal merge --engine spark`` process spends its time: ``python -m bench spark timeline``.

:mod:`bench.spark.breakdown` splits the Spark engine's work in a warm session; this module
looks at the whole process, as an operator runs it (local[2], ``MEMWAL_SPARK_MASTER``):

* ``local`` and ``spark`` merges of the same table (``--change-rows``, default 2M, built once
  by :func:`bench.spark.breakdown.ensure_table`), whole processes, interleaved, fresh copies,
  after one untimed run of each (as the breakdown: both start warm);
* the same two engines on a table with nothing to merge (the merged copy merged again): what a
  no-op run pays for Spark;
* one run of each engine under :mod:`bench.harness.timers` (set ``spark``): when each phase starts
  and ends, in seconds since the process was exec'd (interpreter and imports, CLI, the
  session's start-up in its background thread, the plan, waiting for the session, the Spark
  job (``toArrow``: first Python workers included), the driver's commits, the run
  record and lag, and the process exit after the CLI returned: the JVM's shutdown);
* ``python -c "import lance, pyarrow, memwal.merge.changes"``: what each fresh Python worker
  of the first Spark job pays before its first row.

Writes ``DIR/spark_timeline.json`` and ``DIR/spark_timeline.png``. Figures only.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness.processes import memwal, python, timers
from bench.harness.results import Run, figure, log, parser
from bench.spark.breakdown import PAUSE, ensure_table, fresh_copy

#: Phases drawn on the timeline: (label, function whose first start and last end bound it).
PHASES = [
    ("CLI (after imports)", "memwal.cli:main"),
    ("open table", "memwal.table.handle:open_table"),
    ("session start-up (background)", "memwal.spark.engine.session:local_context"),
    ("plan", "memwal.merge.plan:plan_merge"),
    ("wait for the session", "memwal.spark.engine.session:active_or_local"),
    ("Spark job (toArrow)", "memwal.spark.engine.merge:_run"),
    ("staging commit", "memwal.spark.engine.merge:_assemble"),
    ("local net changes", "memwal.merge.local:local_net_changes"),
    ("delete pass", "memwal.merge.execute:bound_delete_pass"),
    ("marked pass", "memwal.merge.execute:marked_pass"),
    ("data commit (driverless)", "memwal.merge.driverless:data_commit"),
    ("marker commit (driverless)", "memwal.merge.driverless:marker_commit"),
]


def whole(argv: list[str]) -> float:
    return round(memwal(*argv).check().seconds, 3)


def timeline(argv: list[str], result: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    doc = timers(argv, "spark", result)
    took = time.perf_counter() - t0
    if "error" in doc:
        return doc
    fns = doc["functions"]
    phases = [{"phase": label, "function": fn, "start": fns[fn]["first_start"], "end": fns[fn]["last_end"],
               "seconds": fns[fn]["seconds"]} for label, fn in PHASES if fn in fns]
    return {"process_seconds": round(took, 3), "cli_started_at": doc.get("cli_started_at"),
            "cli_seconds": doc["seconds"], "phases": phases, "functions": fns, "missing": doc["missing"]}


def import_seconds(repeat: int = 3) -> float:
    return round(statistics.median(
        python("-c", "import lance, pyarrow, pyarrow.compute, memwal.merge.changes").check().seconds
        for _ in range(repeat)), 3)


def chart(doc: dict, path: Path) -> None:
    with figure(path, rows=2, cols=1, size=(12, 7)) as (fig, axes):
        for ax, engine in zip(axes, ("spark", "local"), strict=True):
            tl = doc["timeline"].get(engine, {})
            phases = tl.get("phases", [])
            for i, ph in enumerate(phases):
                ax.barh(i, max(0.01, ph["end"] - ph["start"]), left=ph["start"], color="#e67e22" if engine == "spark"
                        else "#2471a3")
                ax.text(ph["end"] + 0.05, i, f"{ph['end'] - ph['start']:.2f}s", va="center", fontsize=7)
            if "process_seconds" in tl:
                ax.axvline(tl["process_seconds"], color="black", linestyle="--", linewidth=1)
                ax.text(tl["process_seconds"], len(phases) - 0.5, " process exit", fontsize=7)
            ax.set_yticks(range(len(phases)), [p["phase"] for p in phases], fontsize=7)
            ax.invert_yaxis()
            ax.set_xlabel("seconds since exec")
            ax.set_title(f"memwal merge --engine {engine}, {doc['change_rows']:,} change rows "
                         "(one run, bench.harness.timers)", fontsize=9)


def summary(doc: dict[str, Any]) -> str:
    m = doc["median_seconds"]
    lines = [f"spark/local {doc['spark_over_local']}x ({m['spark']:.2f}s / {m['local']:.2f}s) at "
             f"{doc['change_rows']:,} change rows; no-op merge: spark {m['spark_noop']:.2f}s, "
             f"local {m['local_noop']:.2f}s"]
    for engine in ("spark", "local"):
        for ph in doc["timeline"][engine].get("phases", []):
            lines.append(f"  {engine:5s} {ph['phase']:32s} {ph['start']:6.2f} -> {ph['end']:6.2f}  "
                         f"({ph['seconds']:.2f}s)")
        if "process_seconds" in doc["timeline"][engine]:
            lines.append(f"  {engine:5s} {'process exit':32s} {doc['timeline'][engine]['process_seconds']:6.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = parser("spark timeline", __doc__)
    p.add_argument("--change-rows", type=int, default=2_000_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    out = args.out or "bench-results"
    with Run("spark_timeline", "where a whole memwal merge --engine spark process spends its time", out=out,
             work=args.work or os.path.join(out, "spark-work")) as bench:
        work = bench.work
        pristine, info = ensure_table(work, args.change_rows)
        doc = bench.doc
        doc.update({"change_rows": info["change_rows"], "generations": info["generations"],
                    "master": os.environ.get("MEMWAL_SPARK_MASTER", "local[2]"), "repeat": args.repeat,
                    "runs": {"local": [], "spark": [], "local_noop": [], "spark_noop": []}})
        for engine in ("local", "spark"):  # not timed: each engine's code and jars in the page cache
            log(f"{engine} (warm-up)", "spark")
            whole(["merge", fresh_copy(pristine, work / f"timeline-{engine}"), "--engine", engine, "--json"])
        for r in range(args.repeat):
            for engine in ("local", "spark"):
                copy = fresh_copy(pristine, work / f"timeline-{engine}")
                time.sleep(PAUSE)
                log(f"{engine} ({r + 1}/{args.repeat})", "spark")
                doc["runs"][engine].append(whole(["merge", copy, "--engine", engine, "--json"]))
                time.sleep(PAUSE)
                doc["runs"][f"{engine}_noop"].append(whole(["merge", copy, "--engine", engine, "--json"]))
                shutil.rmtree(copy, ignore_errors=True)
        doc["median_seconds"] = {k: statistics.median(v) for k, v in doc["runs"].items()}
        m = doc["median_seconds"]
        doc["spark_over_local"] = round(m["spark"] / m["local"], 2)
        doc["spark_noop_over_local_noop"] = round(m["spark_noop"] / m["local_noop"], 2)
        doc["timeline"] = {}
        for engine in ("spark", "local"):
            copy = fresh_copy(pristine, work / f"timeline-{engine}")
            time.sleep(PAUSE)
            log(f"{engine} under bench.harness.timers", "spark")
            doc["timeline"][engine] = timeline(["merge", copy, "--engine", engine, "--json"],
                                               work / f"timeline-{engine}.json")
            shutil.rmtree(copy, ignore_errors=True)
        doc["worker_import_seconds"] = import_seconds()
        bench.publish(draw=chart, summary=summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
