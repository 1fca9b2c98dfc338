"""Status and GC planning against table history: ``python -m bench read status --out DIR``.

Issue 23: "a table with 5,000 versions, 1,000 shards and a year of run history must not make
``status`` or a gc plan slower than a fresh one". One table is built with pylance's
``ShardWriter`` (``--shards`` shards, 3 tiny generations each) and merged once by ``memwal
merge``; then copies of it grow what should not matter:

* ``v10`` (the baseline): 10 table versions, no run history;
* ``v1000`` / ``v5000``: 1,000 / 5,000 versions (``update_config`` commits: cheap, real);
* ``v10+history`` and ``v5000+history``: plus a year of run records under
  ``_mem_wal/_jobs/history/<month>/`` (the merge's own record hard-linked under one key per run,
  start times spread over 365 days: ``--runs-per-day`` runs a day, jobs in turn; a hard link is
  a regular file to every reader, and costs no bytes).

Then each table has one real ``memwal gc`` run, as a table in service has had (it keeps the
history: ``--history-retention`` of 400 days). The run deletes nothing (the generations are in
their grace period) and leaves the retained-progress digest
(:mod:`memwal.table.progress_digest`), so the next plan reads only the manifests committed
since; that first run, which reads every manifest, is timed too (``build.<table>_first_gc_seconds``).

On every table, interleaved, as whole processes (``python -m memwal.cli ...``): ``status
--json`` (what an operator and the lag sensor run; it also checks unmerged generations'
files), ``status --html`` (the page, which reads the latest runs), ``gc --dry-run --json``
(the gc plan, default options) and ``merge --json`` with nothing to merge (a no-op merge still
plans, takes its lease and records its run and the lag, which reads the status). Each figure
is a ratio to the baseline table's median; the goal is 1.3x at most. Then one run of each on
each table under :mod:`bench.harness.timers`: seconds per core function, to show what grows.

Writes ``DIR/status_scale.json`` and ``DIR/status_scale.png``. Figures only.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.data.tables import copy_table
from bench.data.tiny import _rows
from bench.harness.processes import memwal
from bench.harness.processes import timers as timed
from bench.harness.results import Run, figure, log, parser

TARGET = 1.3
JOBS = ("merge", "catchup", "snapshot", "gc")
#: The history a table's earlier GC run kept: all of the year's.
KEEP_HISTORY_SECONDS = 400 * 86400
COMMANDS = {
    "status": (["status", "{t}", "--json"], "status"),
    "status-html": (["status", "{t}", "--html", "{page}", "--json"], "status"),
    "gc-plan": (["gc", "{t}", "--dry-run", "--json"], "status"),
    "merge-noop": (["merge", "{t}", "--json"], "merge"),
}


# --------------------------------------------------------------------------- tables


def build_base(path: str, shards: int, generations: int = 3, rows: int = 4) -> dict:
    """``shards`` shards of ``generations`` tiny generations (ShardWriter), merged once."""
    import numpy as np

    from memwal.demo import Workload, create_base_table

    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    ds, _ = create_base_table(path, Workload(base_rows=1000, shards=shards, indexes=False, seed=3))
    schema = ds.schema
    for s in range(shards):
        writer = ds.mem_wal_writer(str(uuid.UUID(int=(s + 1) * 7919 + 11, version=4)), max_memtable_rows=rows,
                                   durable_write=False)
        try:
            for g in range(generations):
                # keys disjoint across shards (k * shards + s), as routing makes them
                writer.put(_rows(schema, (np.arange(rows) + g * rows) * shards + s))
        finally:
            writer.close()
    t1 = time.perf_counter()
    merged = cli(["merge", path, "--json"])
    if merged["exit_code"] != 0:
        raise RuntimeError(f"merge of the pristine table failed: {merged}")
    return {"shards": shards, "generations_per_shard": generations, "write_seconds": round(t1 - t0, 1),
            "merge_seconds": merged["seconds"]}


def add_versions(path: str, total: int) -> float:
    """Commit ``update_config`` until the table has ``total`` versions."""
    import lance

    t0 = time.perf_counter()
    ds = lance.dataset(path)
    i = 0
    while ds.version < total:
        ds.update_config({"bench.status-scale": str(i)})
        i += 1
    return time.perf_counter() - t0


def add_history(path: str, runs_per_day: int, days: int = 365) -> int:
    """Hard-link the table's one history record (and its detail object, when the record is
    kept as a summary: 1,000 shards) under a year of run keys (newest now)."""
    from memwal.history.log import HISTORY_PREFIX, detail_key, record_key

    folder = Path(path, HISTORY_PREFIX)
    records = sorted(p for p in folder.glob("**/*.json") if not p.name.endswith(".detail.json"))
    if not records:
        raise RuntimeError(f"{folder}: no history record to copy")
    src = records[0]
    detail = Path(detail_key(str(src)))
    now = time.time()
    step = 86400 / runs_per_day
    n = runs_per_day * days
    for i in range(n):
        key = record_key(now - 60 - i * step, JOBS[i % len(JOBS)], f"{i:016x}")
        Path(path, key).parent.mkdir(exist_ok=True)
        os.link(src, Path(path, key))
        if detail.exists():
            os.link(detail, Path(path, detail_key(key)))
    return n


def clone(src: str, dst: str) -> str:
    return copy_table(src, dst, preserve=True)  # the history's hard links kept


def cli(argv: list[str]) -> dict[str, Any]:
    """``memwal ARGV`` timed from exec to exit (exit 1 is a verdict, not an error)."""
    proc = memwal(*argv)
    out: dict[str, Any] = {"seconds": round(proc.seconds, 3), "exit_code": proc.rc}
    if proc.rc not in (0, 1):
        out["error"] = proc.error()
    return out


def timers(argv: list[str], which: str, result: Path) -> dict[str, Any]:
    doc = timed(argv, which, result)
    if "error" in doc:
        return doc
    top = sorted(doc["functions"].items(), key=lambda kv: -kv[1]["seconds"])
    return {"seconds": doc["seconds"], "exit_code": doc["exit_code"], "missing": doc["missing"],
            "functions": dict(top)}


def measure(tables: dict[str, str], repeat: int, work: Path) -> dict:
    """Every command on every table, interleaved; medians and ratios to the first table."""
    runs: dict[str, dict[str, list[float]]] = {c: {t: [] for t in tables} for c in COMMANDS}
    codes: dict[str, dict[str, int]] = {c: {} for c in COMMANDS}
    for r in range(repeat):
        for cmd, (argv, _) in COMMANDS.items():
            for name, path in tables.items():
                args = [a.format(t=path, page=str(work / f"{name}.html")) for a in argv]
                res = cli(args)
                if "error" in res:
                    raise RuntimeError(f"{cmd} on {name} failed: {res['error']}")
                runs[cmd][name].append(res["seconds"])
                codes[cmd][name] = res["exit_code"]
                log(f"{cmd} {name} ({r + 1}/{repeat}): {res['seconds']:.2f}s exit {res['exit_code']}", "status")
    base = next(iter(tables))
    out: dict = {}
    for cmd, per in runs.items():
        med = {t: statistics.median(v) for t, v in per.items()}
        out[cmd] = {t: {"seconds": round(med[t], 3), "runs": per[t], "exit_code": codes[cmd][t],
                        "over_baseline": round(med[t] / med[base], 2)} for t in tables}
    return out


# --------------------------------------------------------------------------- chart


def chart(doc: dict, path: Path) -> None:
    tables = list(doc["tables"])
    cmds = list(doc["commands"])
    with figure(path, rows=1, cols=2, size=(15, 5)) as (fig, axes):
        ax = axes[0]
        width = 0.8 / len(tables)
        for i, t in enumerate(tables):
            ax.bar([j + i * width for j in range(len(cmds))], [doc["commands"][c][t]["seconds"] for c in cmds],
                   width, label=t)
        ax.set_xticks([j + width * (len(tables) - 1) / 2 for j in range(len(cmds))], cmds)
        ax.set_ylabel("seconds (whole process, median)")
        ax.set_title(f"{doc['shards']} shards: versions and a year of run history", fontsize=9)
        ax.legend(fontsize=8)
        ax = axes[1]
        for i, t in enumerate(tables):
            ax.bar([j + i * width for j in range(len(cmds))], [doc["commands"][c][t]["over_baseline"] for c in cmds],
                   width, label=t)
        ax.axhline(TARGET, color="black", linestyle="--", linewidth=1, label=f"goal {TARGET}x")
        ax.set_xticks([j + width * (len(tables) - 1) / 2 for j in range(len(cmds))], cmds)
        ax.set_ylabel(f"seconds / {tables[0]}'s")
        ax.set_yscale("log")
        ax.set_title("ratio to the fresh table (≤ 1.3 meets the goal)", fontsize=9)
        ax.legend(fontsize=8)


def summary(doc: dict) -> str:
    tables = list(doc["tables"])
    lines = [f"status and gc planning, {doc['shards']} shards, whole processes (medians, x baseline {tables[0]})"]
    lines.append(f"  {'command':12s} " + " ".join(f"{t:>22s}" for t in tables))
    for cmd, per in doc["commands"].items():
        lines.append(f"  {cmd:12s} " + " ".join(f"{per[t]['seconds']:10.2f}s ({per[t]['over_baseline']:5.2f}x)"
                                                for t in tables))
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = parser("read status", __doc__, smoke=True)
    p.add_argument("--shards", type=int, default=1000)
    p.add_argument("--versions", default="10,1000,5000", help="versions of the tables (the first is the baseline)")
    p.add_argument("--runs-per-day", type=int, default=96, help="history records per day, for a year (default: "
                   "one run every 15 minutes: 35,040 records)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-timers", action="store_true")
    args = p.parse_args(argv)
    if args.smoke:
        args.shards, args.versions, args.runs_per_day, args.repeat = 8, "10,40", 4, 1
    versions = [int(v) for v in args.versions.split(",")]
    with Run("status_scale", "status and gc planning against versions and run history", out=args.out,
             work=args.work, shards=args.shards, runs_per_day=args.runs_per_day, repeat=args.repeat,
             target_max_over_baseline=TARGET) as run:
        doc, work = run.doc, run.work
        try:
            pristine = str(work / "pristine")
            run.log(f"building {args.shards} shards")
            doc["build"] = build_base(pristine, args.shards)
            tables: dict[str, str] = {}
            prev = pristine
            for v in versions:
                name = f"v{v}"
                tables[name] = clone(prev, str(work / name))
                doc["build"][f"{name}_seconds"] = round(add_versions(tables[name], v), 1)
                prev = tables[name]
            for v in (versions[0], versions[-1]):
                name = f"v{v}+history"
                tables[name] = clone(tables[f"v{v}"], str(work / name))
                t0 = time.perf_counter()
                doc["build"]["history_records"] = add_history(tables[name], args.runs_per_day)
                doc["build"][f"{name}_seconds"] = round(time.perf_counter() - t0, 1)
            for name, path in tables.items():  # the scheduled GC a table in service has had
                ran = cli(["gc", path, "--history-retention", str(KEEP_HISTORY_SECONDS), "--json"])
                if ran["exit_code"] != 0:
                    raise RuntimeError(f"gc of {name} failed: {ran}")
                doc["build"][f"{name}_first_gc_seconds"] = ran["seconds"]
            doc["tables"] = dict(tables)
            run.log(f"built: {doc['build']}")
            doc["commands"] = measure(tables, args.repeat, work)
            if not args.no_timers:
                doc["timers"] = {}
                for cmd, (argv_t, which) in COMMANDS.items():
                    for name, path in tables.items():
                        a = [x.format(t=path, page=str(work / f"{name}.html")) for x in argv_t]
                        run.log(f"timers: {cmd} on {name}")
                        doc["timers"].setdefault(cmd, {})[name] = timers(a, which, work / f"timers-{cmd}-{name}.json")
            doc["met"] = all(per[t]["over_baseline"] <= TARGET for per in doc["commands"].values() for t in per)
            doc["ok"] = True
        except RuntimeError as exc:
            doc["ok"] = False
            doc["error"] = str(exc)
            run.log(f"FAILED: {exc}")
        done = "commands" in doc
        run.publish(draw=chart if done else None, summary=summary if done else None)
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
