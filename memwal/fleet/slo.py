"""Service levels: the lag each table is owed, the breaches, and how pending work spreads.

Two targets per table (:class:`memwal.fleet.policy.Slo`, by default, source and table): the
age of its oldest unmerged generation, and the generations any one shard lists, merged or not:
what every list-reading client opens on each read (issue 54: 377 merged generations still
listed made a new process's read take 82 s while no unmerged count moved). A plan
finds every table past either (:func:`breaches_of`); they are counted as metrics (by target,
never with the table in a metric's name), raised as an Airflow alert naming the tables, and
shown on the page. :func:`histogram` is how many shards of the fleet hold how many pending
generations (lance-context #259: "a histogram of pending generations per shard").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memwal.fleet.debt import TableState
from memwal.fleet.policy import Slo

AGE, GENERATIONS = "oldest_unmerged_age", "generations_per_shard"
#: Upper bounds of the histogram's buckets (pending generations of a shard); the last is open.
BOUNDS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class Breach:
    table: str
    slo: str  # AGE or GENERATIONS
    value: float
    target: float

    def describe(self) -> str:
        if self.slo == AGE:
            return f"slo: oldest unmerged generation {self.value:.0f} s old, target {self.target:.0f} s"
        return (f"slo: {self.value:.0f} generations listed in one shard (every reader opens them), "
                f"target {self.target:.0f}")

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "slo": self.slo, "value": self.value, "target": self.target}


def breaches_of(table: str, state: TableState, slo: Slo) -> tuple[Breach, ...]:
    out = []
    age = state.oldest_unmerged_age_seconds
    if slo.oldest_unmerged_seconds is not None and age is not None and age > slo.oldest_unmerged_seconds:
        out.append(Breach(table, AGE, age, slo.oldest_unmerged_seconds))
    if slo.generations_per_shard is not None and state.max_shard_listed > slo.generations_per_shard:
        out.append(Breach(table, GENERATIONS, state.max_shard_listed, slo.generations_per_shard))
    return tuple(out)


def histogram(pending: Iterable[int]) -> dict[str, Any]:
    """Shards by pending generations: ``counts[i]`` shards hold at most ``bounds[i]`` (and more
    than the bound before); the last count is every shard above the last bound."""
    counts = [0] * (len(BOUNDS) + 1)
    for n in pending:
        counts[next((i for i, b in enumerate(BOUNDS) if n <= b), len(BOUNDS))] += 1
    return {"bounds": list(BOUNDS), "counts": counts}


__all__ = ["AGE", "BOUNDS", "GENERATIONS", "Breach", "breaches_of", "histogram"]
