"""When each of a follower's jobs is due: the merge at once, the others on cadences of their own.

A job is due when it has something new to look at (it is *dirty*) and its cadence allows it:

* the merge is dirtied by a shard that moved (a flush, a claim, another compactor), and stays
  dirty after a merge that committed when its batches are bounded (``--max-generations``,
  ``--max-rows``, ``--max-bytes``: it may have left more); the follower runs it only when its plan
  has work. An unbounded merge took every generation its plan saw, and what was flushed since
  moved a shard: planning it again found nothing, once a flush, at a cost that grows with the
  shard's manifest versions;
* catch-up, compaction and GC are dirtied by a merge that committed; GC also by a shard that
  moved (a writer reopened: what it held may go now), and again ``gc_retry`` seconds after a run
  that waited for time (the grace period, retained versions). The whole GC backs off while it
  frees nothing (:func:`memwal.cycle.outcome.gc_freed`: a rollup or a pruning of old shard-manifest
  versions is not counted, as beside a writer that never stops every run has one): each run that
  freed nothing doubles its cadence, from ``gc_every`` up to ``gc_max_every``; one that freed or
  drained something goes back to ``gc_every``, and when a run names the time its gates pass (its
  ``wait``'s ``frees_at``), the next may run then. Less GC deletes nothing more: it only leaves
  what it would free a little longer (at most ``gc_max_every``, or until the time GC named).
  Whatever it frees, a whole GC starts no sooner after the last than :data:`GC_SHARE` of the time
  between them: it names every folder the version retention keeps, a cost that grows with the
  retention (a week beside a writer flushing 35 a minute is 350,000 folders), so the follower
  spaces it by what the last one took rather than let it take more and more of its time; what
  it frees goes that much later;
* GC's listing pass (:data:`memwal.follow.options.LISTING`: GC with ``listed_only``) is dirtied
  by a merge that committed, and when a listed generation with no key index that GC found too
  young to rewrite may be (``heal_at``: every list reader fails while it is listed, so the
  follower does not wait for the next flush). It runs when the whole GC is not due (which does
  all it does), and its cadence is its own (``rollup_every``, 3 s): a follower rolls up every few
  seconds after merges and runs the whole GC, which names every folder, once a minute;
* compaction's tail pass (:data:`memwal.follow.options.TAIL`: the compact job on the small
  fragments only) is due once ``compact_fragments`` merges have each appended a fragment to the
  base since the last compaction (a merge that wrote rows writes them as a new fragment); it runs
  when the whole compaction is not due, and either resets the count;
* the snapshot refresh is dirtied by any shard that moved or a merge that committed.

A job that failed, or whose lease another holder has, stays dirty and is retried after a delay
that doubles up to :data:`MAX_RETRY_SECONDS`. At the start every job is dirty: a follower begins
with a whole cycle, but for the whole GC when the run history says one ended lately
(:meth:`Schedule.resumed_gc`): it is spaced from that one, and the listing pass runs in its place.
An idle table dirties nothing, so a follower writes nothing to it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memwal.core.defaults import GC_SHARE
from memwal.cycle import CycleResult, JobOutcome, JobStatus
from memwal.cycle.outcome import gc_freed, gc_frees_at, gc_wait
from memwal.follow.options import LISTING, TAIL, FollowOptions

#: The longest a failed or held job waits before it is tried again.
MAX_RETRY_SECONDS = 300.0


@dataclass
class Schedule:
    jobs: Sequence[str]
    options: FollowOptions
    #: Whether a merge's batch is bounded (it may leave work a shard's move will not announce).
    merge_bounded: bool = True
    dirty: set[str] = field(default_factory=set)
    last_run: dict[str, float] = field(default_factory=dict)
    retry_at: dict[str, float] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    #: Jobs that waited for time: dirty again at that moment, whatever else happens.
    wake_at: dict[str, float] = field(default_factory=dict)
    #: Whether the GC that :meth:`due` returned last is the listing pass (not the whole GC).
    listing_only: bool = False
    #: Merges that appended a fragment to the base since the last compaction (either pass).
    appended: int = 0
    #: Whether the compaction that :meth:`due` returned last is the tail pass (not the whole one).
    tail_only: bool = False
    #: Whole GCs in a row that freed nothing (its cadence doubles with each, up to ``gc_max_every``).
    gc_idle: int = 0
    #: When the gates the last whole GC named pass (monotonic; None: it named no time): it may run then.
    gc_frees_at: float | None = None
    #: Seconds the last whole GC took (the next is spaced by it: :data:`GC_SHARE`).
    gc_took: float = 0.0
    #: When a whole GC an earlier process ran lets the first of this one start (:meth:`resumed_gc`).
    gc_not_before: float = float("-inf")

    def __post_init__(self) -> None:
        self.dirty = set(self.jobs) | ({LISTING} if "gc" in self.jobs else set())

    def resumed_gc(self, ago: float, took: float, now: float) -> None:
        """A whole GC an earlier process ran ended ``ago`` seconds before ``now``, after ``took``
        seconds (:func:`memwal.history.log.last_whole_gc`): the next is spaced from it as from one
        this follower ran, so a restart does not pay a week's folders again; the listing pass rolls
        up and heals meanwhile. The run history is a record anyone who writes the table's storage
        can write: what it says delays the whole GC by at most ``gc_max_every``. Only the spacing
        by cost carries over, not ``gc_every``: after a whole GC of a second, a restarted follower
        runs the next within a minute, as before."""
        spaced = now - max(0.0, ago) + max(0.0, took) / GC_SHARE
        self.gc_not_before = min(spaced, now + self.options.gc_max_every)

    def moved(self, shards: Iterable[str]) -> None:
        """Shards moved: the merge, GC and the snapshot have something new to look at."""
        if any(True for _ in shards):
            self.dirty |= {"merge", "gc", "snapshot"} & set(self.jobs)

    def due(self, now: float) -> list[str]:
        """The jobs to run now, in cycle order; ``gc`` is the listing pass when :attr:`listing_only`."""
        for job, at in list(self.wake_at.items()):
            if now >= at:
                self.dirty.add(job)
                del self.wake_at[job]
        due = [j for j in self.jobs if j in self.dirty and now >= self._allowed_at(j)]
        self.listing_only = "gc" not in due and self._ready(LISTING, now)
        self.tail_only = "compact" not in due and self._tail_due() and now >= self._allowed_at(TAIL)
        return [j for j in self.jobs if j in due or (self.listing_only and j == "gc")
                or (self.tail_only and j == "compact")]

    def _ready(self, name: str, now: float) -> bool:
        return "gc" in self.jobs and name in self.dirty and now >= self._allowed_at(name)

    def _tail_due(self) -> bool:
        return "compact" in self.jobs and self.appended >= self.options.compact_fragments

    def next_due(self, now: float) -> float | None:
        """When the next job is due, as things stand (None: none is dirty or waiting)."""
        names = [*self.jobs, LISTING] if "gc" in self.jobs else list(self.jobs)
        times = [max(now, self._allowed_at(j)) for j in names if j in self.dirty]
        times += [max(now, at) for at in self.wake_at.values()]
        times += [max(now, self._allowed_at(TAIL))] if self._tail_due() else []
        return min(times) if times else None

    def _allowed_at(self, job: str) -> float:
        last = self.last_run.get(job, float("-inf"))
        cadence = last + self.options.every(job)
        if job == "gc":
            frees_in = None if self.gc_frees_at is None else self.gc_frees_at - last
            cadence = last + gc_wait(self.options.gc_every, self.options.gc_max_every, self.gc_idle, frees_in)
            cadence = max(cadence, last + self.gc_took / GC_SHARE, self.gc_not_before)
        return max(cadence, self.retry_at.get(job, float("-inf")))

    def nothing_to_merge(self) -> None:
        """The merge planned and found no work: clean until a shard moves."""
        self.dirty.discard("merge")

    def ended(self, result: CycleResult, now: float) -> None:
        """What the cycle that ran at ``now`` came to."""
        for outcome in result.jobs:
            job = LISTING if outcome.job == "gc" and self.listing_only else \
                TAIL if outcome.job == "compact" and self.tail_only else outcome.job
            if outcome.status in (JobStatus.NOT_RUN, JobStatus.SKIPPED, JobStatus.CANCELLED):
                continue
            self.last_run[job] = now
            if outcome.status in (JobStatus.FAILED, JobStatus.HELD):
                n = self.failures[job] = self.failures.get(job, 0) + 1
                self.retry_at[job] = now + min(MAX_RETRY_SECONDS, self.options.poll_seconds * 2 ** n)
                continue
            self.failures.pop(job, None)
            self.retry_at.pop(job, None)
            self.dirty.discard(job)
            if job == "gc":
                self.dirty.discard(LISTING)  # the whole GC rolled up and healed as well
                self._gc_ran(outcome.document or {}, now)
                self.gc_took = outcome.seconds
            if job in ("compact", TAIL):
                self.appended = 0
            committed = outcome.version is not None
            if job == "merge" and committed:
                self.appended += _appended_a_fragment(outcome)
                self.dirty |= {"catchup", "compact", "gc", "snapshot"} & set(self.jobs)
                self.dirty |= {"merge"} if self.merge_bounded else set()
                self.dirty |= {LISTING} if "gc" in self.jobs else set()
            if outcome.status is JobStatus.WAITING and job == "gc":  # time alone frees more: again after gc_retry
                self.wake_at[job] = now + self.options.gc_retry
            heal_at = (outcome.document or {}).get("heal_at")
            if isinstance(heal_at, int | float):  # a key-index gap to rewrite: the listing pass then (monotonic)
                at = _monotonic(float(heal_at), now)
                self.wake_at[LISTING] = min(self.wake_at.get(LISTING, at), at)

    def _gc_ran(self, doc: Mapping[str, Any], now: float) -> None:
        """A whole GC ended: back off while it frees nothing, from the time its gates pass."""
        self.gc_idle = 0 if gc_freed(doc) else self.gc_idle + 1
        frees_at = gc_frees_at(doc)
        self.gc_frees_at = None if frees_at is None else _monotonic(frees_at, now)


def _monotonic(wall: float, now: float) -> float:
    """A wall-clock time a job's document named (``heal_at``, ``frees_at``) on the schedule's
    monotonic clock, where ``now`` is the monotonic time the job ran at; a past time is ``now``."""
    return now + max(0.0, wall - time.time())


def _appended_a_fragment(merge: JobOutcome) -> bool:
    """Whether a merge that committed wrote rows (Lance writes a merge's new and updated rows as a
    new fragment; deletions and a progress marker alone append none)."""
    return any(s.get("rows_upserted", 0) > 0 for s in (merge.document or {}).get("shards", ()))


__all__ = ["MAX_RETRY_SECONDS", "Schedule"]
