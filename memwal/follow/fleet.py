"""Following a fleet: ``memwal fleet run --follow``, one long-lived process for many tables.

The fleet's own run (:func:`memwal.fleet.run.run_fleet`) does the work, round after round, with
everything a fleet run has: discovery, the debt order, ``--workers``, the policy's thresholds,
batch bounds and job options, the operator's pauses and quiet hours (read at every plan), quota
shares, cancels (a table whose work an operator cancelled is not started again by this follower),
the shared state. What following adds is the wait where a run would end: a round that found no
work (or did none) is followed by another after ``poll_seconds``, doubling while the fleet stays
idle up to ``max_poll_seconds``; a round that did work is followed at once. A plan of an unchanged
table costs its two listings (the probe cache: :mod:`memwal.fleet.probe`), which is what the
follower pays per table per poll. The jobs' cadences are the policy's (``thresholds``), as for
every fleet run.

Like a table follower, it warns once per table whose GC options (the fleet policy's, as its
GC jobs get them) keep versions more than an hour (:func:`memwal.follow.table.warn_long_retention`),
when the table is first planned: GC walks every generation those versions keep at each run.

It stops as a table follower does (:mod:`memwal.follow.table`): SIGTERM or SIGINT, or
``--max-seconds`` (no table started after it), end the work running at its next safe point, and
the process exits 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from memwal.cycle import CycleResult, parse_jobs
from memwal.follow.options import FollowOptions
from memwal.follow.result import FollowTally
from memwal.follow.signals import StopSignals


def follow_fleet(sources: Sequence[str], follow: FollowOptions, *, stop: StopSignals,
                 notify: Callable[[str, Any], None] | None = None, **fleet: Any) -> FollowTally:
    """Run the fleet of ``sources`` until stopped (see the module docstring); ``fleet``: the
    keywords of :func:`memwal.fleet.run.run_fleet` (policy, workers, max_seconds, state...)."""
    from memwal.fleet.run import run_fleet

    tally = FollowTally(", ".join(sources))
    began = time.monotonic()
    delay = [follow.poll_seconds]
    hear = notify or (lambda event, value: None)

    warn = _retention_warner(fleet)

    def heard(event: str, value: Any) -> None:
        if event == "round":
            warn(value)
            tally.looks += 1
            tally.requests += int(getattr(value, "requests", 0) or 0)
        if event == "table" and isinstance(value, CycleResult):
            tally.add(value)
        hear(event, value)

    def between(progressed: bool) -> bool:
        delay[0] = follow.poll_seconds if progressed else min(follow.max_poll_seconds, delay[0] * 2)
        return not stop.stopped and not stop.wait(delay[0])

    max_seconds = fleet.pop("max_seconds", None)
    if follow.max_seconds is not None:
        max_seconds = follow.max_seconds if max_seconds is None else min(max_seconds, follow.max_seconds)
    run_fleet(sources, notify=heard, between=between, max_seconds=max_seconds, **fleet)
    tally.seconds = time.monotonic() - began
    tally.stopped = stop.reason or ("max-seconds" if max_seconds is not None else None)
    return tally


def _retention_warner(fleet: dict[str, Any]) -> Callable[[Any], None]:
    """``warn(plan)``: the long-retention warning, once per table of the fleet's plans, with the
    GC options the fleet runs that table's GC with (none when the run leaves GC out)."""
    from memwal.actions.options import GcOptions
    from memwal.fleet.policy import Policy
    from memwal.fleet.run import options_for
    from memwal.follow.table import warn_long_retention

    policy = fleet.get("policy") or Policy()
    jobs = fleet.get("jobs")
    runs_gc = "gc" in parse_jobs(list(jobs) if jobs else None)
    seen: set[str] = set()

    def warn(plan: Any) -> None:
        if not runs_gc:
            return
        for t in plan.tables:
            if t.table in seen:
                continue
            seen.add(t.table)
            gc = options_for(policy.for_table(t.table, t.source), "gc", engine=fleet.get("engine", "local"),
                             dry_run=False)
            warn_long_retention(t.table, GcOptions.from_kwargs(**gc), "after every merge here")

    return warn


__all__ = ["follow_fleet"]
