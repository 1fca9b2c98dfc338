"""Where a whole ``memwal merge --engine spark`` process spends its time: ``python -m bench.spark_timeline``.

``bench/spark_breakdown.py`` splits the Spark engine's work in a warm session; this module
looks at the whole process, as an operator runs it (local[2], ``MEMWAL_SPARK_MASTER``):

* ``local`` and ``spark`` merges of the same table (``--change-rows``, default 2M, built once
  by ``bench.spark_breakdown.ensure_table``), whole processes, interleaved, fresh copies,
  after one untimed run of each (as ``bench.spark_breakdown``: both start warm);
* the same two engines on a table with nothing to merge (the merged copy merged again): what a
  no-op run pays for Spark;
* one run of each engine under :mod:`bench.timers` (set ``spark``): when each phase starts
  and ends, in seconds since the process was exec'd (interpreter and imports, CLI, the
  session's start-up in its background thread, the plan, waiting for the session, the Spark
  job (``toArrow``: first Python workers included), the driver's commits, the run
  record and lag, and the process exit after the CLI returned: the JVM's shutdown);
* ``python -c "import lance, pyarrow, memwal.merge.changes"``: what each fresh Python worker
  of the first Spark job pays before its first row.

Writes ``DIR/spark_timeline.json`` and ``DIR/spark_timeline.png``. Figures only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.spark_breakdown import PAUSE, ensure_table, fresh_copy

ROOT = Path(__file__).resolve().parent.parent
NOISE = "Index __lance_mem_wal has no fields"

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


def log(msg: str) -> None:
    print(f"[spark-timeline {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _env() -> dict:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def whole(argv: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "memwal.cli", *argv], cwd=ROOT, env=_env(), capture_output=True,
                          text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        err = "\n".join(x for x in proc.stderr.splitlines() if NOISE not in x)[-800:]
        raise RuntimeError(f"memwal {' '.join(argv)} exited {proc.returncode}: {err}")
    return round(took, 3)


def timeline(argv: list[str], result: Path) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bench.timers", "--set", "spark", "--result", str(result), "--",
                           *argv], cwd=ROOT, env=_env(), capture_output=True, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0 or not result.exists():
        return {"error": proc.stderr[-1500:]}
    doc = json.loads(result.read_text())
    fns = doc["functions"]
    phases = [{"phase": label, "function": fn, "start": fns[fn]["first_start"], "end": fns[fn]["last_end"],
               "seconds": fns[fn]["seconds"]} for label, fn in PHASES if fn in fns]
    return {"process_seconds": round(took, 3), "cli_started_at": doc.get("cli_started_at"),
            "cli_seconds": doc["seconds"], "phases": phases, "functions": fns, "missing": doc["missing"]}


def import_seconds(repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import lance, pyarrow, pyarrow.compute, memwal.merge.changes"],
                       cwd=ROOT, env=_env(), check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times), 3)


def chart(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(12, 7))
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
        ax.set_title(f"memwal merge --engine {engine}, {doc['change_rows']:,} change rows (one run, bench.timers)",
                     fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.spark_timeline", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--work", help="where the table is built and kept (default OUT/spark-work)")
    p.add_argument("--change-rows", type=int, default=2_000_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    out = Path(args.out).resolve()
    work = Path(args.work or out / "spark-work").resolve()
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    pristine, info = ensure_table(work, args.change_rows)
    doc: dict = {"change_rows": info["change_rows"], "generations": info["generations"],
                 "master": os.environ.get("MEMWAL_SPARK_MASTER", "local[2]"), "repeat": args.repeat,
                 "runs": {"local": [], "spark": [], "local_noop": [], "spark_noop": []}}
    for engine in ("local", "spark"):  # not timed: each engine's code and jars in the page cache
        log(f"{engine} (warm-up)")
        whole(["merge", fresh_copy(pristine, work / f"timeline-{engine}"), "--engine", engine, "--json"])
    for r in range(args.repeat):
        for engine in ("local", "spark"):
            copy = fresh_copy(pristine, work / f"timeline-{engine}")
            time.sleep(PAUSE)
            log(f"{engine} ({r + 1}/{args.repeat})")
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
        log(f"{engine} under bench.timers")
        doc["timeline"][engine] = timeline(["merge", copy, "--engine", engine, "--json"],
                                           work / f"timeline-{engine}.json")
        shutil.rmtree(copy, ignore_errors=True)
    doc["worker_import_seconds"] = import_seconds()
    (out / "spark_timeline.json").write_text(json.dumps(doc, indent=1) + "\n")
    chart(doc, out / "spark_timeline.png")
    print(f"spark/local {doc['spark_over_local']}x ({m['spark']:.2f}s / {m['local']:.2f}s) at "
          f"{doc['change_rows']:,} change rows; no-op merge: spark {m['spark_noop']:.2f}s, "
          f"local {m['local_noop']:.2f}s", file=sys.stderr)
    for engine in ("spark", "local"):
        for ph in doc["timeline"][engine].get("phases", []):
            print(f"  {engine:5s} {ph['phase']:32s} {ph['start']:6.2f} -> {ph['end']:6.2f}  ({ph['seconds']:.2f}s)",
                  file=sys.stderr)
        if "process_seconds" in doc["timeline"][engine]:
            print(f"  {engine:5s} {'process exit':32s} {doc['timeline'][engine]['process_seconds']:6.2f}",
                  file=sys.stderr)
    print(f"wrote {out / 'spark_timeline.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
