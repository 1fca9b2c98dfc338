"""Soak: a live ShardWriter plus every job as a real CLI process, concurrently, for minutes.

Usage (by hand, not in CI; about ``--seconds`` plus a minute)::

    .venv/bin/python -m bench.soak --work /tmp/soak [--seconds 300] [--shards 4] [--out bench-results]

What runs at once, until ``--seconds`` have passed:

* a writer thread: one pylance ``ShardWriter`` per shard (small MemTables, so a generation
  is flushed every few puts), putting new keys, updating and deleting live ones, routed by
  Lance's own sharding; a row model records every write;
* one loop per command, each starting ``memwal <command> TABLE`` as a process again and
  again: ``merge``, ``catchup``, ``compact``, ``gc --grace-seconds 0 --writer-idle-seconds 0 --expire-versions 0``,
  ``snapshot``, ``verify``, ``scan --limit 5``.

Every exit code is counted per command, and the runs that lost a race and redid their work
(``runs_that_retried``: memwal.core.retry logs each lost attempt). The goals: **no exit code 2** (bad input: nothing
here is bad input) and **no false verify alarm** (the table is never damaged here, so any
``verify`` exit 1 is false). Then the writers close (flushing their last generations), a
final ``merge`` runs until nothing is left, and the base table is compared row for row with
the model, and ``verify`` and ``scan`` must agree with it. The summary (counts, the first
error lines of each non-zero outcome, the final check) is printed and written as JSON.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa

COMMANDS: dict[str, list[str]] = {
    "merge": ["merge"],
    "catchup": ["catchup"],
    "compact": ["compact"],
    "gc": ["gc", "--grace-seconds", "0", "--writer-idle-seconds", "0", "--expire-versions", "0"],
    "snapshot": ["snapshot"],
    "verify": ["verify"],
    "scan": ["scan", "--limit", "5"],
}


def memwal_bin() -> str:
    here = Path(sys.executable).parent / "memwal"
    return str(here) if here.exists() else "memwal"


class Writer(threading.Thread):
    """Live ``ShardWriter``s, one per shard, and the model of what they wrote."""

    def __init__(self, uri: str, workload, stop: threading.Event, seed: int) -> None:
        super().__init__(daemon=True, name="soak-writer")
        from memwal.demo import Model, create_base_table

        self.uri, self.workload, self.stop = uri, workload, stop
        _, self.model = create_base_table(uri, workload)
        self.model: Model
        self.rng = random.Random(seed)
        self.puts = self.deletes = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        from memwal.demo import bucket_of, shard_ids_for

        try:
            ds = lance.dataset(self.uri)
            schema = ds.schema
            template = ds.to_table(limit=1)
            shards = shard_ids_for(self.workload)
            writers = [ds.mem_wal_writer(s, max_memtable_rows=60, durable_write=False) for s in shards]
            live: dict[int, list[int]] = {b: [] for b in range(len(shards))}
            keys = sorted(self.model.rows)
            for k, b in zip(keys, bucket_of(ds, keys), strict=True):
                live[b].append(k)
            next_key = max(keys) + 1
            try:
                while not self.stop.is_set():
                    fresh = list(range(next_key, next_key + 16))
                    next_key += 16
                    for k, b in zip(fresh, bucket_of(ds, fresh), strict=True):
                        live[b].append(k)
                    for b, w in enumerate(writers):
                        ids = self.rng.sample(live[b], min(len(live[b]), 8))
                        if not ids:
                            continue
                        batch = pa.table({
                            "id": pa.array(ids, pa.int64()),
                            "name": [f"soak-{self.puts}-{i}" for i in ids],
                            "value": pa.array([self.rng.random() for _ in ids]),
                            "vec": pa.array([template["vec"][0].as_py()] * len(ids), schema.field("vec").type),
                        }, schema=schema)
                        w.put(batch)
                        self.model.put(batch)
                        self.puts += 1
                        if self.rng.random() < 0.3:
                            gone = self.rng.sample(live[b], 1)
                            w.delete(pa.table({"id": pa.array(gone, pa.int64())}))
                            self.model.delete(gone)
                            live[b].remove(gone[0])
                            self.deletes += 1
                    time.sleep(0.3)
            finally:
                for w in writers:
                    w.close()  # flushes the last MemTable as a generation
        except BaseException as exc:  # noqa: BLE001 - reported in the summary
            self.error = exc


class Loop(threading.Thread):
    """One command, run as a process again and again; exit codes and first error lines kept."""

    def __init__(self, name: str, uri: str, stop: threading.Event, log_dir: Path) -> None:
        super().__init__(daemon=True, name=f"soak-{name}")
        self.name_, self.uri, self.stop, self.log_dir = name, uri, stop, log_dir
        self.codes: collections.Counter = collections.Counter()
        #: Runs that lost a race and redid their work (memwal.core.retry logs each lost attempt).
        self.retried = 0
        self.errors: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
        self.seconds: list[float] = []

    def run(self) -> None:
        argv = [memwal_bin(), *COMMANDS[self.name_][:1], self.uri, *COMMANDS[self.name_][1:]]
        n = 0
        while not self.stop.is_set():
            started = time.monotonic()
            done = subprocess.run(argv, capture_output=True, text=True)
            self.seconds.append(time.monotonic() - started)
            self.codes[done.returncode] += 1
            self.retried += "lost a race" in done.stderr
            n += 1
            if done.returncode:
                lines = [ln for ln in done.stderr.splitlines() if ln.startswith("memwal: error:")]
                first = lines[0] if lines else (done.stderr.strip().splitlines() or ["(no output)"])[-1]
                if self.name_ == "verify":
                    first = (done.stdout.strip().splitlines() or [first])[0] + " | " + " / ".join(
                        done.stdout.strip().splitlines()[1:3])
                self.errors[done.returncode][first[:400]] += 1
                (self.log_dir / f"{self.name_}-{n}-rc{done.returncode}.txt").write_text(
                    f"$ {' '.join(argv)}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}")
            time.sleep(0.2)


def final_check(uri: str, model) -> dict[str, Any]:
    """Merge what is left, then the table against the row model, verify and scan."""
    from memwal.inspect.status import table_status
    from memwal.inspect.verify import verify_table
    from memwal.merge import run_merge
    from memwal.read import lsm_scan
    from memwal.table import open_table

    table = open_table(uri)
    for _ in range(20):
        if not table_status(table).unmerged_generations:
            break
        run_merge(table)
    rows = sorted(table.dataset().to_table().to_pylist(), key=lambda r: r["id"])
    expected = model.sorted_rows()
    mismatched = [(a["id"], b["id"]) for a, b in zip(rows, expected, strict=False) if a != b][:5]
    lsm = sorted(lsm_scan(table).to_pylist(), key=lambda r: r["id"])
    result = verify_table(table)
    return {
        "rows": len(rows),
        "model_rows": len(expected),
        "table_equals_model": rows == expected,
        "first_mismatches": mismatched,
        "lsm_view_equals_model": lsm == expected,
        "verify_ok": result.ok,
        "verify_problems": [p.detail for p in result.problems],
        "unmerged_generations_left": table_status(table).unmerged_generations,
    }


def main(argv: list[str] | None = None) -> int:
    from memwal.demo import Workload

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True, help="scratch folder (the table and failure logs go here)")
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--out", help="folder for soak.json")
    args = ap.parse_args(argv)

    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    logs = work / "failures"
    logs.mkdir(parents=True)
    uri = str(work / "table")
    wl = Workload(base_rows=2000, shards=args.shards, generations=0, seed=args.seed)
    stop = threading.Event()
    writer = Writer(uri, wl, stop, args.seed)
    loops = [Loop(name, uri, stop, logs) for name in COMMANDS]
    started = time.time()
    writer.start()
    time.sleep(3)  # a few generations flushed before the jobs start
    for loop in loops:
        loop.start()
    while time.time() - started < args.seconds:
        time.sleep(5)
        done = {lp.name_: sum(lp.codes.values()) for lp in loops}
        print(f"[{time.time() - started:5.0f}s] runs {done} writes {writer.puts}", file=sys.stderr, flush=True)
    stop.set()
    for loop in loops:
        loop.join()
    writer.join()
    summary: dict[str, Any] = {
        "seconds": round(time.time() - started, 1),
        "shards": args.shards,
        "writer": {"puts": writer.puts, "deletes": writer.deletes,
                   "error": repr(writer.error) if writer.error else None},
        "exit_codes": {lp.name_: dict(sorted(lp.codes.items())) for lp in loops},
        "runs_that_retried": {lp.name_: lp.retried for lp in loops},
        "mean_seconds": {lp.name_: round(sum(lp.seconds) / max(1, len(lp.seconds)), 2) for lp in loops},
        "exit_2": sum(lp.codes[2] for lp in loops),
        "false_verify_alarms": next(lp.codes[1] for lp in loops if lp.name_ == "verify"),
        "errors": {lp.name_: {rc: dict(c.most_common(5)) for rc, c in lp.errors.items()} for lp in loops
                   if lp.errors},
        "failure_logs": str(logs),
    }
    summary["final"] = final_check(uri, writer.model)
    text = json.dumps(summary, indent=2, default=str)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        Path(args.out, "soak.json").write_text(text)
    good = (summary["exit_2"] == 0 and summary["false_verify_alarms"] == 0 and summary["final"]["table_equals_model"]
            and summary["final"]["verify_ok"] and not writer.error)
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
