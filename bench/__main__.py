"""The one entry point of the benches.

::

    python -m bench                                list the concepts and their cases
    python -m bench CONCEPT [--out DIR]            every case of CONCEPT as ``make bench`` runs it
    python -m bench CONCEPT --smoke --out DIR      every case of CONCEPT that has a smoke, at its tiny size
    python -m bench CONCEPT CASE [ARGS...]         one case with its own arguments (``CASE --help``)

A concept's cases run one after the other, each as its own process (one case's Spark session or
memory never reaches the next), and the first that fails stops the rest, as ``make`` would.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile

from bench.cases import CONCEPTS, Case, concept, every


def listing() -> str:
    lines = ["python -m bench CONCEPT [CASE] [ARGS...]; cases (* in make bench, s: has a smoke):"]
    for name, cases in every().items():
        lines.append(f"  {name}")
        for c in cases:
            mark = ("*" if c.bench is not None else " ") + ("s" if c.smoke is not None else " ")
            lines.append(f"    {mark} {c.name:14s} {c.about}")
    return "\n".join(lines)


def run_case(name: str, case: Case, argv: list[str]) -> int:
    main = importlib.import_module(case.module).main
    code: int | None = main(argv)
    return code or 0


def run_all(name: str, argv: list[str]) -> int:
    """Every case of concept ``name`` (``--smoke``: those with a smoke, at its size), each a process."""
    from bench.harness.processes import python
    from bench.harness.results import log

    p = argparse.ArgumentParser(prog=f"python -m bench {name}", description=f"every case of {name}")
    p.add_argument("--out", default="bench-results", help="the results folder (default bench-results)")
    p.add_argument("--smoke", action="store_true", help="every case that has a smoke, at its tiny size")
    args = p.parse_args(argv)
    for case in concept(name):
        which = case.smoke if args.smoke else case.bench
        if which is None:
            continue
        with tempfile.TemporaryDirectory(prefix=f"memwal-bench-{case.name}-") as work:
            case_argv = case.argv(which, args.out, work)
            log(f"{name} {case.name} {' '.join(case_argv)}")
            proc = python("-m", "bench", name, case.name, *case_argv, stdout=None, stderr=None)
        if proc.rc != 0:
            log(f"{name} {case.name} FAILED (exit {proc.rc})")
            return proc.rc
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in CONCEPTS:
        print(f"no concept {name!r}\n{listing()}", file=sys.stderr)
        return 2
    cases = {c.name: c for c in concept(name)}
    if rest and not rest[0].startswith("-"):
        if rest[0] not in cases:
            print(f"no case {rest[0]!r} in {name}\n{listing()}", file=sys.stderr)
            return 2
        return run_case(name, cases[rest[0]], rest[1:])
    return run_all(name, rest)


if __name__ == "__main__":
    sys.exit(main())
