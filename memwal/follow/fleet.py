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
every fleet run, but for the whole GC and catch-up (below).

Like a table follower, it spaces each table's whole GC by what the last one took and by its
``gc_every`` (a minute), doubled after each whole GC that freed nothing up to ``gc_max_every`` (ten
minutes), and each table's catch-up by its ``catchup_every`` (a minute; the fleet's run:
:class:`memwal.fleet.run.Spacing`), running GC's listing pass after merges meanwhile: a whole GC
names every folder the version retention keeps, and a week of them made a GC after every merge
cost more as the table aged; with the whole GC and catch-up after every merge, a table flushing
every 10 s cost the follower 120 ms of CPU a flush (issue 82).

It stops as a table follower does (:mod:`memwal.follow.table`): SIGTERM or SIGINT, or
``--max-seconds`` (no table started after it), end the work running at its next safe point, and
the process exits 0.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from memwal.cycle import CycleResult
from memwal.follow.options import FollowOptions
from memwal.follow.result import FollowTally
from memwal.follow.signals import StopSignals

log = logging.getLogger(__name__)


def follow_fleet(sources: Sequence[str], follow: FollowOptions, *, stop: StopSignals,
                 notify: Callable[[str, Any], None] | None = None, **fleet: Any) -> FollowTally:
    """Run the fleet of ``sources`` until stopped (see the module docstring); ``fleet``: the
    keywords of :func:`memwal.fleet.run.run_fleet` (policy, workers, max_seconds, state...)."""
    from memwal.fleet.run import run_fleet

    tally = FollowTally(", ".join(sources))
    began = time.monotonic()
    delay = [follow.poll_seconds]
    hear = notify or (lambda event, value: None)

    def heard(event: str, value: Any) -> None:
        if event == "round":
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
    run_fleet(sources, notify=heard, between=between, max_seconds=max_seconds,
              every={"catchup": follow.catchup_every, "gc": follow.gc_every, "gc_max": follow.gc_max_every}, **fleet)
    tally.seconds = time.monotonic() - began
    tally.stopped = stop.reason or ("max-seconds" if max_seconds is not None else None)
    return tally


__all__ = ["follow_fleet"]
