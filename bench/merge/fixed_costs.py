"""A job's fixed costs, as whole processes, beside their floors (issue 49).

Usage::

    .venv/bin/python -m bench merge fixed-costs [--work /tmp/fixed] [--runs 7] [--out DIR]

What every scheduled run pays before it does any work: the interpreter, the imports, opening
the table's store, the lease, the run's history record. Measured on a table with nothing to
merge (every generation merged once first), so ``memwal merge`` is those costs and nothing
else. Each command is a whole process (``python -m memwal.cli ...``, as a scheduler starts it),
the commands taken in turn run after run so that a drift of the machine's speed touches each
alike; medians of wall and CPU seconds:

* ``python``: ``python -c pass``, the interpreter's own start;
* ``import_lance``: ``python -c "import lance"``, the floor of any process that reads a Lance table;
* ``open_lance``: ``import lance`` and ``lance.dataset(TABLE)``, the floor of any job on this table;
* ``help``: ``memwal --help`` (goal: 0.35 s on an idle machine);
* ``merge_noop``: ``memwal merge TABLE --json`` with nothing to merge;
* ``status``: ``memwal status TABLE --json``.

Ratios: ``merge_noop / open_lance`` and ``merge_noop / import_lance`` (what the job adds over
the floor), ``help / python`` (what the CLI's start adds to the interpreter's). Nothing is
asserted; the JSON document goes to stdout (and ``--out``). :mod:`bench.merge.main` runs it as its
``fixed_costs`` point.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

from bench.harness.processes import run
from bench.harness.results import Run, parser

GOAL_HELP_SECONDS = 0.35


def commands(table: str) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "python": [py, "-c", "pass"],
        "import_lance": [py, "-c", "import lance"],
        "open_lance": [py, "-c", "import sys, lance; lance.dataset(sys.argv[1])", table],
        "help": [py, "-m", "memwal.cli", "--help"],
        "merge_noop": [py, "-m", "memwal.cli", "merge", table, "--json"],
        "status": [py, "-m", "memwal.cli", "status", table, "--json"],
    }


def whole_process(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of ``argv``, from start to exit; a failure is an error."""
    proc = run(argv).check()
    return proc.seconds, proc.cpu_seconds


def idle_table(path: str) -> dict[str, Any]:
    """A small MemWAL table (2 shards, 4 generations each) with every generation merged."""
    import memwal
    from memwal.demo import Workload, create_base_table, write_generations

    wl = Workload(base_rows=1000, shards=2, generations=4, rows_per_generation=50, indexes=True, seed=3)
    _, model = create_base_table(path, wl)
    write_generations(path, wl, model)
    merged = memwal.open(path).merge()
    if not merged.ok:
        raise RuntimeError(f"the first merge failed: {merged.problems}")
    return {"base_rows": wl.base_rows, "shards": wl.shards, "generations": wl.generations}


def fixed_costs(work: Path, runs: int = 7) -> dict[str, Any]:
    """Every command ``runs`` times (after one warm-up each), in turn; medians and ratios."""
    import shutil

    table = str(work / "fixed-costs-table")
    shutil.rmtree(table, ignore_errors=True)
    info = idle_table(table)
    cmds = commands(table)
    for argv in cmds.values():  # warm-up: caches, bytecode
        whole_process(argv)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, argv in cmds.items():
            samples[name].append(whole_process(argv))
    shutil.rmtree(table, ignore_errors=True)
    med = {name: {"wall_seconds": round(statistics.median(w for w, _ in s), 3),
                  "cpu_seconds": round(statistics.median(c for _, c in s), 3)} for name, s in samples.items()}

    def ratio(a: str, b: str, figure: str) -> float:
        return round(med[a][figure] / max(med[b][figure], 1e-9), 2)

    return {
        "table": info, "runs": runs, "commands": med,
        "ratios": {f"{a}/{b} ({fig.split('_')[0]})": ratio(a, b, fig)
                   for a, b in (("merge_noop", "open_lance"), ("merge_noop", "import_lance"), ("help", "python"),
                                ("status", "open_lance"))
                   for fig in ("wall_seconds", "cpu_seconds")},
        "goals": {"help_wall_seconds_max": GOAL_HELP_SECONDS},
        "goals_met": {"help": med["help"]["wall_seconds"] <= GOAL_HELP_SECONDS},
    }


def main(argv: list[str] | None = None) -> int:
    p = parser("merge fixed-costs", __doc__)
    p.add_argument("--runs", type=int, default=7, help="counted runs of each command (default 7)")
    args = p.parse_args(argv)
    with Run("fixed_costs", "a job's fixed costs beside their floors", out=args.out, work=args.work) as bench:
        bench.doc.update(fixed_costs(bench.work, args.runs))
        bench.publish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
