"""What a list reader's read costs for what the shard manifest lists (issue 54).

Usage::

    .venv/bin/python -m bench read floor [--rows 100000] [--runs 5] [--out DIR]

The steady-state bench (:mod:`bench.read.steady`) compares a new process's read with a table holding
the same rows and no generation. This bench says what part of that gap belongs to the reader
itself: pylance 14's ``LsmScanner`` over the latest base table and the listed generations, as a
user builds it from the shard manifests, on three tables written by ``ShardWriter`` with the same
base rows: nothing listed; one small unmerged generation (what any live writer has listed between
two flushes of the maintenance); one generation holding a new version of every key (what a
rollup held for a writer open since the start amounts to). Each read is a new process's first
(as in :mod:`bench.read.steady`: a reader process's first read pays for what Lance sets up on first
use), timed inside it from opening the table to the last row; medians of ``--runs``, the three
tables taken in turn; every read's row count is checked against the model.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness.processes import python
from bench.harness.results import Run, parser

CASES = (("nothing listed", 0), ("one small generation", 200), ("one generation of every key", None))


def _read_in_new_process(uri: str) -> tuple[float, int]:
    out = python("-m", "bench.read.floor", "--read", uri).check().stdout
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


def main(argv: list[str] | None = None) -> int:
    p = parser("read floor", __doc__)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--read", default=None, help=argparse.SUPPRESS)  # one read, in the child process
    args = p.parse_args(argv)
    if args.read:
        print(json.dumps(_read(args.read)))
        return 0
    with Run("list_reader_floor", "what a list reader's read costs for what the shard manifest lists",
             out=args.out, work=args.work, rows=args.rows, runs=args.runs) as bench:
        tables = build(bench.work, args.rows)
        times: dict[str, list[float]] = {name: [] for name in tables}
        for _ in range(args.runs):
            for name, (uri, expected) in tables.items():
                seconds, got = _read_in_new_process(uri)
                if got != expected:
                    raise SystemExit(f"{name}: read {got} rows, the model holds {expected}")
                times[name].append(seconds)
        floor = statistics.median(times[CASES[0][0]])
        bench.doc["reads"] = {name: {"median_seconds": round(statistics.median(ts), 4), "over_nothing_listed":
                                     round(statistics.median(ts) / floor, 2)} for name, ts in times.items()}
        bench.publish(summary=summary)
    return 0


def summary(doc: dict[str, Any]) -> str:
    return "\n".join(f"{name}: {r['median_seconds']}s, {r['over_nothing_listed']}x nothing listed"
                     for name, r in doc["reads"].items())


if __name__ == "__main__":
    sys.exit(main())
