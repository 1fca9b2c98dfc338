"""Following one table: one long-lived process that merges as soon as a shard has work.

``memwal cycle TABLE --follow`` (and :func:`follow_table`): instead of a cycle every minute from a
scheduler, each a new process that pays its start-up and leaves a minute of flushes listed, one
process looks at the table's shards every poll (:class:`memwal.follow.watch.ShardWatch`: a
version hint per shard), plans a merge when one moved, and runs the jobs that are due
(:class:`memwal.follow.schedule.Schedule`) through the one cycle runner (:func:`memwal.cycle.run_cycle`):
every job is a ``memwal <job>`` run, with its leases, its history record, its metrics (the lag,
the generations each reader lists) and its own verdict. A failed job is retried later; the
follower goes on.

The follower holds the ``follow`` lease of the table while it runs (one follower per table; a
second one exits 3 naming the first), renewed by its heartbeat. It stops

* when asked (SIGTERM, SIGINT: :mod:`memwal.follow.signals`) or when ``max_seconds`` is up: the
  job running then ends at its next safe point, the leases are released, exit 0;
* when an operator cancels its work (``memwal fleet cancel TABLE``, met through its leases) or
  its lease is taken over: exit 3, as any job;
* when the table was removed (its ``_versions/`` is gone): one line saying so, exit 1. It used to
  go on failing merges there, its leases writing ``_mem_wal/_jobs/leases/`` back into the removed
  path (issue 83; :mod:`memwal.lease.guard`). The table is looked for when something says it may
  be gone (a look found a shard's manifests or a shard gone, a job failed, the lease was lost), not
  at every look.

What breaks is said once: a shard whose newest manifest cannot be read is said by the watch
(:class:`~memwal.follow.watch.ShardWatch`) when it breaks and when it reads again, the merges
leave it out meanwhile (the other shards go on), and a job that fails again with the same error,
or with one about that shard, is not said again (the run history and the tally keep every run).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from memwal.actions import ACTIONS
from memwal.actions.options import LISTING_PASS, CompactOptions, GcOptions, JobOptions, MergeOptions
from memwal.actions.run import new_run_id
from memwal.core import steps
from memwal.cycle import JobOutcome, JobStatus, Notify, run_cycle
from memwal.follow.options import TAIL_ROWS, FollowOptions
from memwal.follow.result import CANCELLED, GONE, LEASE_LOST, FollowTally
from memwal.follow.schedule import Schedule
from memwal.follow.signals import StopSignals
from memwal.follow.watch import ShardWatch
from memwal.lease import cancel
from memwal.lease.guard import VERSIONS_DIR, table_gone
from memwal.lease.stop import process_stop

if TYPE_CHECKING:
    from memwal.lease import Lease
    from memwal.merge.model import MergePlan
    from memwal.table import Table

log = logging.getLogger(__name__)

#: The follower's own lease kind (one follower per table).
FOLLOW_KIND = "follow"
#: How often the follower logs what it did so far.
REPORT_SECONDS = 60.0


def merge_work(table: Table, options: MergeOptions) -> tuple[bool, MergePlan | None]:
    """Whether a merge would merge anything now, and the plan it would run: the merge's own plan
    (reads only), its check of the base's keys made only when there is work (a scan of the key
    column, not one at every look). The follower runs that plan rather than planning again. A plan
    or check that fails says yes, with no plan: the merge job plans itself and reports the failure
    as its outcome, with its own verdict (bad input: exit 2, nothing written)."""
    from memwal.actions.policy import with_policy
    from memwal.actions.registry import plan_merge
    from memwal.merge.unique import check_unique_keys

    act = ACTIONS["merge"]
    try:
        plan = plan_merge(table, with_policy(table, options), check_keys=False)
        if act.has_work is not None and not act.has_work(plan):
            return False, None
        check_unique_keys(table, plan)
    except Exception:  # noqa: BLE001 - the job itself reports it, with its own verdict
        return True, None
    return True, plan


def follow_table(table: Table, jobs: Sequence[str], options: Mapping[str, JobOptions], follow: FollowOptions, *,
                 stop: StopSignals, notify: Notify | None = None) -> FollowTally:
    """Follow ``table`` (see the module docstring) until stopped; what it did.

    ``options``: each job's, validated by the caller (a job without an entry runs with its
    defaults). Raises LeaseHeldError (exit 3) when another follower holds the table's
    ``follow`` lease, with nothing done."""
    from memwal.lease import Lease

    lease = Lease(table.store, FOLLOW_KIND, ttl_seconds=follow.lease_ttl, run_id=new_run_id())
    lease.inspect()  # a corrupt lease fails here, with nothing written
    tally = FollowTally(table.uri)
    watch = ShardWatch(table.store, poll_seconds=follow.poll_seconds, max_poll_seconds=follow.max_poll_seconds,
                       rescan_seconds=follow.rescan_seconds)
    said = _SaidOnce(table, watch, notify)
    given = options.get("merge")
    merge_options = given if isinstance(given, MergeOptions) else MergeOptions()
    schedule = Schedule(list(jobs), follow, merge_bounded=merge_options.bounded)
    if "gc" in schedule.jobs:
        _resume_gc(table, schedule)
    began = time.monotonic()
    since = time.time()
    next_report = began + REPORT_SECONDS
    with lease:
        log.info("following %s (jobs %s; looking every %gs to %gs)", table.uri, ",".join(jobs), follow.poll_seconds,
                 follow.max_poll_seconds)
        while not stop.stopped:
            now = time.monotonic()
            if follow.max_seconds is not None and now - began >= follow.max_seconds:
                stop.stop("max-seconds")
                break
            if lease.fenced is not None and _gone(table, tally):
                break
            if _ended_by_others(table, lease, since, tally):
                break
            moved = watch.look(now)
            tally.looks += 1
            if watch.suspect and _gone(table, tally):
                break
            schedule.moved(moved)
            steps.step("follow.looked")
            due = schedule.due(now)
            plans: dict[str, MergePlan] = {}
            merging = _healthy(merge_options, watch)
            if "merge" in due:
                work, plan = (False, None) if merging is None else merge_work(table, merging)
                if not work:
                    schedule.nothing_to_merge()
                    due.remove("merge")
                elif plan is not None:
                    plans["merge"] = plan
            if due:
                scoped = _scoped(options, schedule, None if merging is merge_options else merging)
                result = run_cycle(table, due, scoped, notify=said, plans=plans)
                tally.add(result)
                if any(j.status is JobStatus.FAILED for j in result.jobs) and _gone(table, tally):
                    break
                schedule.ended(result, now)
                steps.step("follow.ran")
                if result.cancelled is not None and not stop.stopped:
                    tally.stopped, tally.detail = CANCELLED, result.cancelled.summary
                    break
                continue  # look again at once: what ran may have left more (a bounded batch), or moved shards
            if time.monotonic() >= next_report:
                log.info("%s", tally.line())
                _publish_lag(table)  # idle: the gauges age as the table does (every job publishes them too)
                next_report = time.monotonic() + REPORT_SECONDS
            wake = schedule.next_due(time.monotonic())
            delay = watch.delay if wake is None else min(watch.delay, wake - time.monotonic())
            stop.wait(max(0.0, delay))
    tally.requests = watch.requests
    tally.seconds = time.monotonic() - began
    if tally.stopped is None:
        tally.stopped = stop.reason
    log.info("%s; stopped: %s", tally.line(), tally.stopped)
    return tally


def _scoped(options: Mapping[str, JobOptions], schedule: Schedule,
            merging: MergeOptions | None = None) -> Mapping[str, JobOptions]:
    """``options`` with GC's as its listing pass and compaction's as its tail pass, when the
    schedule chose those scopes this time, and the merge's as ``merging`` (its shards) when given."""
    out = dict(options)
    if merging is not None:
        out["merge"] = merging
    if schedule.listing_only:
        gc = options.get("gc")
        out["gc"] = (gc if isinstance(gc, GcOptions) else GcOptions()).but(**LISTING_PASS)
    if schedule.tail_only:
        out["compact"] = tail_pass(options.get("compact"))
    return out


def tail_pass(given: JobOptions | None) -> CompactOptions:
    """Compaction's tail pass: Lance's planner with the fragments under :data:`TAIL_ROWS` rows as its
    candidates (the given target when lower) and no fragment chosen for its deletions, so what it
    rewrites is what merges appended since the last compaction, never a large fragment; the whole
    compaction, on its cadence, materialises the deletions."""
    o = given if isinstance(given, CompactOptions) else CompactOptions()
    return o.but(target_rows_per_fragment=min(o.target_rows_per_fragment or TAIL_ROWS, TAIL_ROWS),
                 materialize_deletions_threshold=1.0)


def _healthy(given: MergeOptions, watch: ShardWatch) -> MergeOptions | None:
    """The merge's options with the shards the watch finds broken left out (None: no shard left to
    merge); ``given`` itself while none is broken. A broken shard stops only itself in a merge,
    but the merge fails, and a failed merge waits its retry delay (up to five minutes) before it
    merges the other shards again."""
    if not watch.broken:
        return given
    shards = [s for s in (given.shards or sorted(watch.seen)) if s not in watch.broken]
    return given.but(shards=tuple(shards)) if shards else None


def _resume_gc(table: Table, schedule: Schedule) -> None:
    """Space the first whole GC from the last one any process ran (:meth:`Schedule.resumed_gc`);
    with no such run in the history, or a history that cannot be read, it runs at the start."""
    from memwal.core import clock as clocks
    from memwal.history.log import last_whole_gc

    try:
        last = last_whole_gc(table.store)
    except Exception as exc:  # noqa: BLE001 - the whole GC then runs at the start, as it always may
        log.debug("%s: no last whole GC from the history: %s", table.uri, exc)
        return
    if last is not None:
        finished, took = last
        schedule.resumed_gc(clocks.current()() - finished, took, time.monotonic())


def _gone(table: Table, tally: FollowTally) -> bool:
    """Whether the table was removed (no ``_versions/``): then the tally says so, once."""
    try:
        gone = table_gone(table.store)
    except Exception as exc:  # noqa: BLE001 - a listing that fails says nothing about the table
        log.debug("%s: could not list it: %s", table.uri, exc)
        return False
    if gone:
        tally.stopped, tally.detail = GONE, f"{table.uri}: the table is gone (no {VERSIONS_DIR}/): stopped following it"
    return gone


class _SaidOnce:
    """A follower's ``notify`` that says a failure once (the module docstring): not again while a
    job fails with the same error, nor for a shard the watch said is broken, nor at all once the
    table is gone (the follower says that)."""

    def __init__(self, table: Table, watch: ShardWatch, notify: Notify | None) -> None:
        self.table, self.watch, self.notify = table, watch, notify
        self.last: dict[str, str | None] = {}

    def __call__(self, event: str, outcome: JobOutcome) -> None:
        if self.notify is None:
            return
        if event == "end" and outcome.status is JobStatus.FAILED:
            error = outcome.error or ""
            again = self.last.get(outcome.job) == error
            self.last[outcome.job] = error
            broken = [sid for sid in sorted(self.watch.seen) if sid in error and self.watch.check(sid)]
            if again or broken or _quietly_gone(self.table):
                log.debug("%s %s failed again: %s", outcome.table, outcome.job, error)
                return
        elif event == "end" and outcome.status in (JobStatus.DONE, JobStatus.WAITING):
            self.last.pop(outcome.job, None)  # it worked: a failure after it is news
        self.notify(event, outcome)


def _quietly_gone(table: Table) -> bool:
    """:func:`_gone` without a word: a failed job's line is dropped when the table went."""
    try:
        return table_gone(table.store)
    except Exception:  # noqa: BLE001 - see _gone
        return False


def _ended_by_others(table: Table, lease: Lease, since: float, tally: FollowTally) -> bool:
    """Whether an operator cancelled the follower's work, or its lease was taken over (its
    heartbeat found it), while it waited."""
    fenced = lease.fenced
    if fenced is not None:
        tally.stopped, tally.detail = LEASE_LOST, f"the follow lease on {table.store.root} was lost: {fenced}"
        return True
    request = cancel.cancelled(table.store.root, since)
    if request is not None and process_stop() is None:
        tally.stopped, tally.detail = CANCELLED, cancel.describe(request)
        return True
    return False


def _publish_lag(table: Table) -> None:
    """The lag and listing gauges of ``table`` now (:func:`memwal.inspect.status.lag_now`)."""
    from memwal.inspect.status import lag_now

    try:
        lag_now(table)
    except Exception as exc:  # noqa: BLE001 - a gauge never stops a follower
        log.debug("%s: lag not published: %s", table.uri, exc)


def logged(event: str, outcome: JobOutcome) -> None:
    """A follower's ``notify``: a failed job is a warning (the follower goes on); the rest is
    in the run history and the metrics."""
    from memwal.cycle import JobStatus

    if event == "end" and outcome.status is JobStatus.FAILED:
        log.warning("%s %s failed (retried later): %s", outcome.table, outcome.job, outcome.error)


__all__ = ["FOLLOW_KIND", "follow_table", "logged", "merge_work", "tail_pass"]
