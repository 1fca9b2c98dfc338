"""What a list reader's read costs for what the shard manifest lists (issue 54).

Usage::

    .venv/bin/python -m bench.list_reader_floor [--rows 100000] [--runs 5] [--out DIR]

The steady-state bench (:mod:`bench.steady`) compares a new process's read with a table holding
the same rows and no generation. This bench says what part of that gap belongs to the reader
itself: pylance 14's ``LsmScanner`` over the latest base table and the listed generations, as a
user builds it from the shard manifests, on three tables written by ``ShardWriter`` with the same
base rows: nothing listed; one small unmerged generation (what any live writer has listed between
two flushes of the maintenance); one generation holding a new version of every key (what a
rollup held for a writer open since the start amounts to). Each read is a new process's first
(as in :mod:`bench.steady`: a reader process's first read pays for what Lance sets up on first
use), timed inside it from opening the table to the last row; medians of ``--runs``, the three
tables taken in turn; every read's row count is checked against the model. JSON to stdout and
``--out``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import log, machine_info

CASES = (("nothing listed", 0), ("one small generation", 200), ("one generation of every key", None))


def _read_in_new_process(uri: str) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-m", "bench.list_reader_floor", "--read", uri], capture_output=True,
                         text=True, check=True, cwd=Path(__file__).resolve().parents[1]).stdout
    seconds, rows = json.loads(out.splitlines()[-1])
    return float(seconds), int(rows)


def _read(uri: str) -> tuple[float, int]:
    from lance.mem_wal import LsmScanner

    from memwal.read.plan import plan_read
    from memwal.table import open_table

    t0 = time.perf_counter()
    table = open_table(uri)
    plan = plan_read(table, source="manifests", include_merged=True)
    rows = LsmScanner.from_snapshots(table.dataset(), plan.snapshots).to_table().num_rows
    return time.perf_counter() - t0, rows


def build(root: Path, rows: int) -> dict[str, tuple[str, int]]:
    """The three tables: name -> (uri, rows the model holds)."""
    from memwal.demo import Workload, create_base_table, shard_ids_for
    from tests.clients.pylance_client import LiveWriter

    workload = Workload(base_rows=rows, shards=1, generations=0, rows_per_generation=30, seed=3,
                        maintain_vector_index=False)
    out = {}
    for name, keys in CASES:
        uri = str(root / name.replace(" ", "-"))
        _, model = create_base_table(uri, workload)
        n = rows if keys is None else keys
        if n:
            writer = LiveWriter(uri, shard_ids_for(workload)[0], model, rows=n)
            writer.generation(sorted(model.rows)[:n])
            writer.close()
        out[name] = (uri, len(model.rows))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=None)
    parser.add_argument("--read", default=None, help=argparse.SUPPRESS)  # one read, in the child process
    args = parser.parse_args()
    if args.read:
        print(json.dumps(_read(args.read)))
        return
    root = Path(tempfile.mkdtemp(prefix="memwal-list-floor-"))
    try:
        tables = build(root, args.rows)
        times: dict[str, list[float]] = {name: [] for name in tables}
        for _ in range(args.runs):
            for name, (uri, expected) in tables.items():
                seconds, got = _read_in_new_process(uri)
                if got != expected:
                    raise SystemExit(f"{name}: read {got} rows, the model holds {expected}")
                times[name].append(seconds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    floor = statistics.median(times[CASES[0][0]])
    doc: dict[str, Any] = {"machine": machine_info(), "rows": args.rows, "runs": args.runs, "reads": {
        name: {"median_seconds": round(statistics.median(ts), 4), "over_nothing_listed":
               round(statistics.median(ts) / floor, 2)} for name, ts in times.items()}}
    for name, r in doc["reads"].items():
        log(f"{name}: {r['median_seconds']}s, {r['over_nothing_listed']}x nothing listed")
    text = json.dumps(doc, indent=2)
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "list_reader_floor.json").write_text(text)


if __name__ == "__main__":
    main()
