"""The benches' registry: concepts, their cases, and the arguments each is run with.

A *concept* is a package of ``bench`` (merge, gc, read, spark, fleet, clients) whose ``__init__``
lists its :class:`Case`\\ s and imports nothing heavy. A *case* is a module with a
``main(argv) -> int`` and the arguments ``make bench`` gives it (:attr:`Case.bench`; None: run by
hand only) and those of its smoke (:attr:`Case.smoke`: a tiny size that checks the harness; None:
no smoke). ``{out}`` stands for the results folder, ``{work}`` for a scratch folder.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

#: The concepts, in the order ``make bench`` runs them.
CONCEPTS = ("merge", "gc", "read", "spark", "fleet", "clients")


@dataclass(frozen=True)
class Case:
    """One bench: ``python -m bench CONCEPT NAME [ARGS]`` runs ``MODULE.main(ARGS)``."""

    name: str
    module: str
    about: str
    #: The arguments of ``make bench``'s run (None: by hand only).
    bench: tuple[str, ...] | None = None
    #: The arguments of its smoke (``make bench-smoke``; None: none).
    smoke: tuple[str, ...] | None = None
    #: The document it writes under its ``--out`` (``OUT/<json>.json``) and whether a chart goes beside it.
    json: str = ""
    chart: bool = True

    def argv(self, which: tuple[str, ...], out: str, work: str = "") -> list[str]:
        return [a.format(out=out, work=work) for a in which]


def concept(name: str) -> tuple[Case, ...]:
    """The cases of concept ``name`` (its package's ``CASES``)."""
    if name not in CONCEPTS:
        raise KeyError(name)
    cases: tuple[Case, ...] = importlib.import_module(f"bench.{name}").CASES
    return cases


def every() -> dict[str, tuple[Case, ...]]:
    return {name: concept(name) for name in CONCEPTS}


def find(concept_name: str, case: str) -> Case:
    for c in concept(concept_name):
        if c.name == case:
            return c
    raise KeyError(f"{concept_name} {case}")


__all__ = ["CONCEPTS", "Case", "concept", "every", "find"]
