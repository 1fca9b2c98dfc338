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
  its lease is taken over: exit 3, as any job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from memwal.actions import ACTIONS
from memwal.actions.options import CompactOptions, GcOptions, JobOptions, MergeOptions
from memwal.actions.run import new_run_id
from memwal.core import steps
from memwal.core.defaults import DEFAULT_EXPIRE_VERSIONS_SECONDS
from memwal.cycle import JobOutcome, Notify, run_cycle
from memwal.follow.options import TAIL_ROWS, FollowOptions
from memwal.follow.result import CANCELLED, LEASE_LOST, FollowTally
from memwal.follow.schedule import Schedule
from memwal.follow.signals import StopSignals
from memwal.follow.watch import ShardWatch
from memwal.lease import cancel
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
#: A version retention longer than this on a followed table keeps more generation folders than GC,
#: which walks them all at every run (every few seconds here), can walk within a follower's budget:
#: an hour beside a writer flushing 35 a minute is some 2,100 folders (docs/operations/deploy.md).
LONG_RETENTION_SECONDS = 3600.0


def merge_work(table: Table, options: MergeOptions) -> tuple[bool, MergePlan | None]:
    """Whether a merge would merge anything now, and the plan it would run: the merge's own plan
    (reads only), its check of the base's keys made only when there is work (a scan of the key
    column, not one at every look). The follower runs that plan rather than planning again. A plan
    or check that fails says yes, with no plan: the merge job plans itself and reports the failure
    as its outcome, with its own verdict (bad input: exit 2, nothing written)."""
    from memwal.actions.registry import plan_merge
    from memwal.merge.unique import check_unique_keys

    act = ACTIONS["merge"]
    try:
        plan = plan_merge(table, options, check_keys=False)
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
    given = options.get("merge")
    merge_options = given if isinstance(given, MergeOptions) else MergeOptions()
    schedule = Schedule(list(jobs), follow, merge_bounded=merge_options.bounded)
    began = time.monotonic()
    since = time.time()
    next_report = began + REPORT_SECONDS
    with lease:
        if "gc" in jobs:
            warn_long_retention(table.uri, options.get("gc"), f"every {follow.gc_every:g}s here, "
                                f"backing off to {follow.gc_max_every:g}s while it frees nothing")
        log.info("following %s (jobs %s; looking every %gs to %gs)", table.uri, ",".join(jobs), follow.poll_seconds,
                 follow.max_poll_seconds)
        while not stop.stopped:
            now = time.monotonic()
            if follow.max_seconds is not None and now - began >= follow.max_seconds:
                stop.stop("max-seconds")
                break
            if _ended_by_others(table, lease, since, tally):
                break
            moved = watch.look(now)
            tally.looks += 1
            schedule.moved(moved)
            steps.step("follow.looked")
            due = schedule.due(now)
            plans: dict[str, MergePlan] = {}
            if "merge" in due:
                work, plan = merge_work(table, merge_options)
                if not work:
                    schedule.nothing_to_merge()
                    due.remove("merge")
                elif plan is not None:
                    plans["merge"] = plan
            if due:
                result = run_cycle(table, due, _scoped(options, schedule), notify=notify, plans=plans)
                schedule.ended(result, now)
                tally.add(result)
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


def warn_long_retention(uri: str, gc: JobOptions | None, cadence: str) -> None:
    """Say once, at the start, when the version retention keeps more generation folders than a
    follower's GC can walk every few seconds (measured: its CPU a minute grew from 3 to 14 s over
    30 minutes on the defaults, docs/benchmarks.md#keeping-up). A warning, not a
    refusal: the retention is the owner's choice for time travel, and GC stays right either way.
    ``gc``: the GC options the follower runs the table with; ``cadence``: how often its GC runs
    there (a table follower's ``--gc-every``; a fleet follower's GC follows its merges). The
    table follower says it for its table, the fleet follower for each table of the fleet."""
    keep = getattr(gc, "expire_versions", DEFAULT_EXPIRE_VERSIONS_SECONDS)
    if keep is not None and keep <= LONG_RETENTION_SECONDS:
        return
    kept = "forever (--expire-versions never)" if keep is None else f"{keep:g} s"
    log.warning("%s: versions are kept %s, and every generation merged meanwhile stays on storage: GC walks them "
                "all at every run (%s), so the follower's CPU grows with them; on a followed table "
                "keep versions minutes (--expire-versions 600, see docs/operations/deploy.md)", uri, kept, cadence)


def _scoped(options: Mapping[str, JobOptions], schedule: Schedule) -> Mapping[str, JobOptions]:
    """``options`` with GC's as its listing pass and compaction's as its tail pass, when the
    schedule chose those scopes this time."""
    out = dict(options)
    if schedule.listing_only:  # --listed-only; orphans need the whole walk
        gc = options.get("gc")
        out["gc"] = replace(gc if isinstance(gc, GcOptions) else GcOptions(), listed_only=True, orphans=False)
    if schedule.tail_only:
        out["compact"] = tail_pass(options.get("compact"))
    return out


def tail_pass(given: JobOptions | None) -> CompactOptions:
    """Compaction's tail pass: Lance's planner with the fragments under :data:`TAIL_ROWS` rows as its
    candidates (the given target when lower) and no fragment chosen for its deletions, so what it
    rewrites is what merges appended since the last compaction, never a large fragment; the whole
    compaction, on its cadence, materialises the deletions."""
    o = given if isinstance(given, CompactOptions) else CompactOptions()
    return replace(o, target_rows_per_fragment=min(o.target_rows_per_fragment or TAIL_ROWS, TAIL_ROWS),
                   materialize_deletions_threshold=1.0)


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
