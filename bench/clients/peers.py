"""memwal against lance-context's own merger, and what the readers users run gain (issue 46).

On identical copies of a lance-context store written by lance-context 0.6.7 itself (a backlog of
G generations of R rows each, the writer gone):

* **ours**: ``memwal merge`` and ``memwal cycle`` (no grace, every old version expired, writer
  idle 0: the writer is gone) as whole processes;
* **theirs**: a lance-context process calling ``cleanup_wal()`` until it has nothing left;
* **reference**: a store holding the same rows and no generation (the same rows written once
  and merged), what a reader costs at best.

For each: whole-process seconds, CPU seconds, peak RSS, commits, bytes left on storage, and the
readers' time afterwards (lance-context's ``list()`` in a new process; pylance's ``LsmScanner``
over every listed generation). Goals: the reader after ``memwal cycle`` within 1.5x the
reference; G = 1,500 drained in one run at ≤ 512 MB peak RSS; ``memwal merge`` as a whole
process no slower than ``cleanup_wal()``'s loop on G = 30. JSON and a chart in ``--out``.

``python -m bench clients peers [--case 30x2000] [--smoke] [--out DIR] [--work DIR]``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness.processes import ROOT, Proc, run, start
from bench.harness.results import Run, figure, log, parser
from tests.clients.context_store import DRIVER, PYTHON, SCHEMA

MEMWAL = ROOT / ".venv" / "bin" / "memwal"
CASES = {"30x2000": (30, 2000), "1500x200": (1500, 200)}
SMOKE = {"5x50": (5, 50)}
GOAL_READER_OVER_REFERENCE = 1.5
GOAL_DRAIN_RSS_MB = 512
GOAL_MERGE_OVER_CLEANUP = 1.0


def _figures(proc: Proc) -> dict[str, Any]:
    return {"seconds": proc.seconds, "cpu_seconds": proc.cpu_seconds, "peak_rss_mb": proc.peak_rss_mb, "rc": proc.rc}


def memwal(*argv: str) -> Proc:
    """``memwal ARGV`` as its users run it (the installed program), its own peak RSS taken."""
    proc = run([str(MEMWAL), *argv], peak=True, stdout=subprocess.DEVNULL)
    if proc.rc:
        raise RuntimeError(f"memwal {' '.join(argv)} failed: {proc.error()}")
    return proc


def lance_context(*ops: dict[str, Any]) -> tuple[list[Any], Proc]:
    """A new lance-context process running ``ops``: their answers, and the process's figures."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    started = start([str(PYTHON), str(DRIVER)], peak=True, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    text=True, env={**env, "RUST_LOG": "error"})
    proc = started.popen
    assert proc.stdin is not None and proc.stdout is not None
    answers = []
    for op in ops:
        proc.stdin.write(json.dumps(op) + "\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        if "error" in answer:
            raise RuntimeError(f"lance-context {op['op']}: {answer['error']}")
        answers.append(answer["ok"])
    proc.stdin.close()
    return answers, started.wait()


def lc_list(uri: str) -> dict[str, Any]:
    (_, listed), _ = lance_context({"op": "open_existing", "uri": uri}, {"op": "timed_list"})
    return dict(listed)


def pylance_read(uri: str) -> float:
    """Seconds of pylance's ``LsmScanner`` over the base table and every listed generation."""
    from tests.clients.pylance_client import client_view

    t0 = time.perf_counter()
    client_view(uri)
    return time.perf_counter() - t0


def table_facts(uri: str) -> dict[str, Any]:
    import lance

    from memwal.table import open_table
    from memwal.table.shards import all_shard_manifests

    size = sum(p.stat().st_size for p in Path(uri).rglob("*") if p.is_file())
    listed = sum(len(s.flushed) for s in all_shard_manifests(open_table(uri).store).values())
    return {"version": lance.dataset(uri).version, "bytes": size, "listed_generations": listed}


def readers(uri: str) -> dict[str, Any]:
    return {"lance_context_list": lc_list(uri), "pylance_seconds": round(pylance_read(uri), 3)}


def case(work: Path, name: str, generations: int, rows: int) -> dict[str, Any]:
    src = work / name / "src"
    shutil.rmtree(work / name, ignore_errors=True)
    log(f"{name}: lance-context writes {generations} generations of {rows} rows")
    (_, fresh), _ = lance_context({"op": "open", "uri": str(src), "schema": SCHEMA},
                                  {"op": "fill", "generations": generations, "rows": rows})
    copies = {arm: work / name / arm for arm in ("merge", "cycle", "cleanup", "reference")}
    for path in copies.values():
        shutil.copytree(src, path)
    out: dict[str, Any] = {"generations": generations, "rows_per_generation": rows, "keys": fresh,
                           "before": {**table_facts(str(src)), "readers": readers(str(src))}}
    arms: dict[str, Any] = {}
    for arm, argv in (("merge", ("merge",)), ("cycle", ("cycle", "--grace-seconds", "0", "--expire-versions", "0",
                                                        "--writer-idle-seconds", "0"))):
        uri = str(copies[arm])
        before = table_facts(uri)["version"]
        log(f"{name}: memwal {argv[0]}")
        proc = memwal(*argv, uri)
        facts = table_facts(uri)
        arms[f"memwal {argv[0]}"] = {**_figures(proc), **facts, "commits": facts["version"] - before,
                                     "readers": readers(uri)}
    uri = str(copies["cleanup"])
    before = table_facts(uri)["version"]
    log(f"{name}: lance-context cleanup_wal() until nothing is left")
    (_, done), proc = lance_context({"op": "open_existing", "uri": uri}, {"op": "cleanup_all"})
    facts = table_facts(uri)
    arms["lance-context cleanup_wal"] = {**_figures(proc), **facts, "commits": facts["version"] - before,
                                         "cleanup_calls": done["calls"], "readers": readers(uri)}
    out["arms"] = arms
    out["reference"] = reference(work / name / "reference-rows", copies["reference"])
    return out


def reference(path: Path, merged_copy: Path) -> dict[str, Any]:
    """The same rows and no generation: the store's rows written once, merged by lance-context."""
    (_, listed), _ = lance_context({"op": "open_existing", "uri": str(merged_copy)}, {"op": "list"})
    shutil.rmtree(path, ignore_errors=True)
    lance_context({"op": "open", "uri": str(path), "schema": SCHEMA}, {"op": "add", "rows": listed},
                  {"op": "flush"}, {"op": "cleanup_all"})
    return {**table_facts(str(path)), "readers": readers(str(path))}


def goals(cases: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, c in cases.items():
        ref = c["reference"]["readers"]["lance_context_list"]["seconds"]
        after = c["arms"]["memwal cycle"]["readers"]["lance_context_list"]["seconds"]
        out[f"{name}: reader after cycle / reference"] = {"value": round(after / ref, 2),
                                                          "goal": GOAL_READER_OVER_REFERENCE,
                                                          "met": after / ref <= GOAL_READER_OVER_REFERENCE}
        cycle = c["arms"]["memwal cycle"]
        out[f"{name}: drained in one run, peak RSS MB"] = {
            "value": round(cycle["peak_rss_mb"]), "goal": GOAL_DRAIN_RSS_MB,
            "met": cycle["listed_generations"] == 0 and cycle["peak_rss_mb"] <= GOAL_DRAIN_RSS_MB}
        merge, theirs = c["arms"]["memwal merge"]["seconds"], c["arms"]["lance-context cleanup_wal"]["seconds"]
        out[f"{name}: memwal merge / cleanup_wal loop, whole process"] = {
            "value": round(merge / theirs, 2), "goal": GOAL_MERGE_OVER_CLEANUP, "met": merge / theirs <= 1.0}
    return out


def chart(doc: dict[str, Any], path: Path) -> None:
    names = list(doc["cases"])
    with figure(path, rows=1, cols=len(names), size=(6 * len(names), 4), squeeze=False) as (fig, axes):
        for ax, name in zip(axes[0], names, strict=True):
            c = doc["cases"][name]
            labels = ["before"] + list(c["arms"]) + ["reference"]
            secs = ([c["before"]["readers"]["lance_context_list"]["seconds"]]
                    + [a["readers"]["lance_context_list"]["seconds"] for a in c["arms"].values()]
                    + [c["reference"]["readers"]["lance_context_list"]["seconds"]])
            ax.bar(range(len(labels)), secs, color=["#999"] + ["#2a7"] * 2 + ["#c73"] + ["#555"])
            ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
            ax.set_ylabel("lance-context list() seconds")
            ax.set_title(f"{name}: reader after each merger")


def main(argv: list[str] | None = None) -> int:
    p = parser("clients peers", __doc__, smoke=True)
    p.add_argument("--case", action="append", choices=sorted(CASES), help="only these cases (default: all)")
    args = p.parse_args(argv)
    chosen = SMOKE if args.smoke else {n: gr for n, gr in CASES.items() if not args.case or n in args.case}
    with Run("peers", "memwal against lance-context's own merger, and the readers' time after each", out=args.out,
             work=args.work) as bench:
        cases = {name: case(bench.work, name, g, r) for name, (g, r) in chosen.items()}
        bench.doc.update(cases=cases, goals=goals(cases))
        bench.publish(draw=chart, summary=summary)
        shutil.rmtree(bench.work, ignore_errors=True)  # the copies of every case: not kept
    return 0


def summary(doc: dict[str, Any]) -> str:
    return "\n".join(f"{goal}: {v['value']} (goal {v['goal']}): {'met' if v['met'] else 'NOT met'}"
                     for goal, v in doc["goals"].items())


if __name__ == "__main__":
    sys.exit(main())
