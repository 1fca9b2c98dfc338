"""memwal's own reader over a large base and a few generations: the overlay against ``LsmScanner`` (issue 62).

Usage::

    .venv/bin/python -m bench read overlay [--bases 20000,100000,300000] [--runs 7] [--out DIR]

For each base size, tables written by pylance's ``ShardWriter`` (string keys, one shard) with the
listed generations of a writer that never stops: 1, 3 and 10 small generations (200 rows, a third
updates), and one generation holding a new version of a quarter, half and all of the keys (what
a rollup holds). On each, in one process, interleaved run by run: the overlay
(:mod:`memwal.read.overlay`, forced), ``LsmScanner.from_snapshots`` over the same plan, and a
plain read of the base (``lance.dataset(uri).to_table()``); every read's rows are checked against
the model (count and a digest). Medians of ``--runs``. The rule :func:`memwal.read.overlay.overlay_pays`
takes the overlay where it wins; the output says where the crossover lies.

Then the issue's shape as a user meets it: a new process's ``memwal.open(uri).scan()`` (timed
after imports, the rule deciding) against a new process's plain read of a table holding the same
rows and no generation. JSON to stdout and ``--out``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness.processes import ROOT
from bench.harness.results import Run, parser

PK = {"lance-schema:unenforced-primary-key": "true"}
SHARD = str(uuid.UUID(int=62))
#: (name, generations, rows a generation: an int, or a share of the base's keys)
SHAPES: tuple[tuple[str, int, int | float], ...] = (
    ("1 x 200", 1, 200), ("3 x 200", 3, 200), ("10 x 200", 10, 200), ("30 x 200", 30, 200),
    ("1 x base/4", 1, 0.25), ("1 x base/2", 1, 0.5), ("1 x base", 1, 1.0), ("1 x 2 base", 1, 2.0),
    ("2 x 2 base", 2, 2.0))


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema([pa.field("id", pa.string(), nullable=False, metadata=PK), pa.field("v", pa.int64()),
                      pa.field("name", pa.string())])


def build(uri: str, base: int, gens: int, rows: int | float) -> dict[str, int]:
    """The table; the model (key -> value)."""
    import lance
    import pyarrow as pa

    schema = _schema()
    model = {f"k{i:09d}": i for i in range(base)}
    lance.write_dataset(pa.table({"id": list(model), "v": list(model.values()), "name": ["base"] * base},
                                 schema=schema), uri).initialize_mem_wal(unsharded=True)
    n = rows if isinstance(rows, int) else int(base * rows)
    for g in range(1, gens + 1):
        keys = [f"k{(g * 7919 + i * 13) % base:09d}" for i in range(n // 3)]  # updates
        keys += [f"k{base + g * n + i:09d}" for i in range(n - len(keys))]  # new keys
        w = lance.dataset(uri).mem_wal_writer(SHARD, max_memtable_rows=n + 1, durable_write=False)
        w.put(pa.table({"id": keys, "v": [g * 10**9 + i for i in range(n)], "name": [f"g{g}"] * n}, schema=schema))
        w.close()
        model.update({k: g * 10**9 + i for i, k in enumerate(keys)})
    return model


def digest(t: Any) -> int:
    return hash(frozenset(zip(t.column("id").to_pylist(), t.column("v").to_pylist(), strict=True)))


def measure(uri: str, model: dict[str, int], runs: int) -> dict[str, float]:
    import lance
    from lance.mem_wal import LsmScanner

    from memwal.read.overlay import overlay_scan
    from memwal.read.plan import plan_read
    from memwal.table import open_table

    want = hash(frozenset(model.items()))

    def overlay() -> Any:
        table = open_table(uri)
        return overlay_scan(table, table.dataset(), plan_read(table), pays=lambda b, g: True)

    def scanner() -> Any:
        table = open_table(uri)
        return LsmScanner.from_snapshots(table.dataset(), plan_read(table).snapshots).to_table()

    readers: dict[str, Callable[[], Any]] = {"overlay": overlay, "lsm_scanner": scanner,
                                             "plain_base": lambda: lance.dataset(uri).to_table()}
    times: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(runs):
        for name, read in readers.items():
            t0 = time.perf_counter()
            rows = read()
            times[name].append(time.perf_counter() - t0)
            if name != "plain_base" and (rows.num_rows != len(model) or digest(rows) != want):
                raise SystemExit(f"{uri}: {name} read {rows.num_rows} rows, not the model's {len(model)}")
    return {name: round(statistics.median(ts), 5) for name, ts in times.items()}


def new_process(uri: str) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-m", "bench.read.overlay", "--read", uri], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    seconds, rows = json.loads(out.splitlines()[-1])
    return float(seconds), int(rows)


def _read(spec: str) -> tuple[float, int]:
    """One read in this (new) process, timed after imports: ``memwal:URI`` or ``plain:URI``."""
    how, _, uri = spec.partition(":")
    import lance

    import memwal
    import memwal.api  # noqa: F401 - the reader's modules: memwal loads them on a first read, a cost of imports
    import memwal.read.scan  # noqa: F401

    t0 = time.perf_counter()
    rows = memwal.open(uri).scan() if how == "memwal" else lance.dataset(uri).to_table()
    return time.perf_counter() - t0, rows.num_rows


def main(argv: list[str] | None = None) -> int:
    p = parser("read overlay", __doc__, work=False)
    p.add_argument("--bases", default="20000,100000,300000")
    p.add_argument("--shapes", default=None, help="only these shapes (comma-separated names)")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--read", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.read:
        from memwal.core.process import configure_process, quiet_lance

        configure_process()
        quiet_lance()
        print(json.dumps(_read(args.read)))
        return 0
    from memwal.core.process import quiet_lance

    quiet_lance()
    with Run("overlay_read", "memwal's reader over a few small generations, against LsmScanner and a plain read",
             out=args.out, runs=args.runs) as bench:
        doc = bench.doc
        doc.update(shapes=[], new_process={})
        root = bench.work
        for base in (int(b) for b in args.bases.split(",")):
            for name, gens, rows in SHAPES:
                if args.shapes and name not in args.shapes.split(","):
                    continue
                uri = str(root / f"{base}-{name.replace(' ', '_').replace('/', 'over')}.lance")
                model = build(uri, base, gens, rows)
                figures = measure(uri, model, args.runs)
                listed = gens * (rows if isinstance(rows, int) else int(base * rows))
                doc["shapes"].append({"base_rows": base, "listed": name, "listed_rows": listed, **figures,
                                      "overlay_over_lsm": round(figures["overlay"] / figures["lsm_scanner"], 3),
                                      "overlay_over_plain": round(figures["overlay"] / figures["plain_base"], 2)})
                bench.log(f"base {base}, {name}: overlay {figures['overlay']}s, LsmScanner {figures['lsm_scanner']}s, "
                          f"plain {figures['plain_base']}s")
                shutil.rmtree(uri, ignore_errors=True)
        if not args.shapes:  # the shape, new processes: only in a whole run
            doc["new_process"] = _new_process(root, args.runs)
            bench.log(f"new process, the issue's shape: {doc['new_process']}")
        bench.publish()
    return 0


def _new_process(root: Path, runs: int) -> dict[str, Any]:
    """The issue's shape (a 100,000-row base, 3 x 200 rows listed), read by new processes through memwal's
    reader and plainly from a reference table of the same rows, interleaved: medians and spreads."""
    import lance
    import pyarrow as pa

    uri, ref = str(root / "issue.lance"), str(root / "reference.lance")
    model = build(uri, 100_000, 3, 200)
    lance.write_dataset(pa.table({"id": list(model), "v": list(model.values()), "name": ["x"] * len(model)},
                                 schema=_schema()), ref)
    times: dict[str, list[float]] = {"memwal_scan": [], "plain_reference": []}
    for _ in range(runs):
        for name, spec in (("memwal_scan", f"memwal:{uri}"), ("plain_reference", f"plain:{ref}")):
            seconds, got = new_process(spec)
            if got != len(model):
                raise SystemExit(f"{spec}: {got} rows, the model holds {len(model)}")
            times[name].append(seconds)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"shape": "100,000-row base, 3 x 200 rows listed", **{k: round(v, 4) for k, v in med.items()},
            "ratio": round(med["memwal_scan"] / med["plain_reference"], 2),
            "spread": {k: [round(min(v), 4), round(max(v), 4)] for k, v in times.items()}}


if __name__ == "__main__":
    sys.exit(main())
