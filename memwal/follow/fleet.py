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
GC jobs get them) keep versions more than an hour (:func:`warn_long_retention`),
when the table is first planned: GC walks every generation those versions keep at each run.

It stops as a table follower does (:mod:`memwal.follow.table`): SIGTERM or SIGINT, or
``--max-seconds`` (no table started after it), end the work running at its next safe point, and
the process exits 0.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from memwal.actions.options import JobOptions
from memwal.core.defaults import DEFAULT_EXPIRE_VERSIONS_SECONDS
from memwal.cycle import CycleResult, parse_jobs
from memwal.follow.options import FollowOptions
from memwal.follow.result import FollowTally
from memwal.follow.signals import StopSignals

log = logging.getLogger(__name__)

#: A version retention longer than this keeps more generation folders than a fleet follower's GC,
#: which walks them all after every merge, can walk within a follower's budget: an hour beside a
#: writer flushing 35 a minute is some 2,100 folders (docs/operations/deploy.md).
LONG_RETENTION_SECONDS = 3600.0


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



def warn_long_retention(uri: str, gc: JobOptions | None, cadence: str) -> None:
    """Say once, when a table is first planned, that its version retention keeps more generation
    folders than a fleet follower's GC, which follows its merges and names every folder at each
    run, can walk every few seconds. A warning, not a refusal: the retention is the owner's
    choice for time travel, and GC stays right either way. (A table follower spaces its whole GC
    by what the last one took instead: :data:`memwal.follow.schedule.GC_SHARE`.)
    ``gc``: the GC options the table's jobs get; ``cadence``: how often its GC runs."""
    keep = getattr(gc, "expire_versions", DEFAULT_EXPIRE_VERSIONS_SECONDS)
    if keep is not None and keep <= LONG_RETENTION_SECONDS:
        return
    kept = "forever (--expire-versions never)" if keep is None else f"{keep:g} s"
    log.warning("%s: versions are kept %s, and every generation merged meanwhile stays on storage: GC walks them "
                "all at every run (%s), so the follower's CPU grows with them; on a table a fleet "
                "follows, keep versions minutes (--expire-versions 600, see docs/operations/deploy.md)",
                uri, kept, cadence)


__all__ = ["follow_fleet", "warn_long_retention"]
