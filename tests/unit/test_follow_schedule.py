"""A follower's look at the shards (version hints, the listing behind them) and its schedule."""

from __future__ import annotations

import time
import uuid

import lance
import pyarrow as pa
import pytest

from memwal.core.defaults import GC_SHARE
from memwal.cycle import CycleResult, JobOutcome, JobStatus
from memwal.errors import BadInputError
from memwal.follow.options import FollowOptions
from memwal.follow.schedule import MAX_RETRY_SECONDS, Schedule
from memwal.follow.watch import ShardWatch
from memwal.table import open_table
from memwal.table.naming import version_hint_key

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK), pa.field("v", pa.int64())])
JOBS = ["merge", "catchup", "compact", "gc", "snapshot"]


def flush(uri: str, shard: str, n: int) -> None:
    """``n`` generations of ``shard``, each flushed by its writer's close."""
    for i in range(n):
        w = lance.dataset(uri).mem_wal_writer(shard, max_memtable_rows=100, durable_write=False)
        w.put(pa.table({"id": pa.array([i], pa.int64()), "v": pa.array([i], pa.int64())}))
        w.close()


def test_the_watch_sees_flushes_by_hint_a_bad_hint_by_listing_and_new_shards_at_a_rescan(tmp_path):
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.Table.from_pylist([], schema=SCHEMA), uri).initialize_mem_wal(unsharded=True)
    a, b = str(uuid.UUID(int=1)), str(uuid.UUID(int=2))
    flush(uri, a, 1)
    store = open_table(uri).store
    watch = ShardWatch(store, poll_seconds=1, max_poll_seconds=8, rescan_seconds=100)
    assert watch.look(0) == {a} and watch.delay == 1  # the first look: every shard
    assert watch.look(1) == set() and watch.delay == 1
    # looks at once (after each job a follower ran) back nothing off: time does
    assert watch.look(2) == set() and watch.look(2) == set() and watch.look(2) == set() and watch.delay == 1
    assert watch.look(4) == set() and watch.delay == 2
    assert watch.look(12) == set() and watch.delay == 6
    assert watch.look(20) == set() and watch.delay == 8  # up to max_poll_seconds
    flush(uri, a, 1)
    assert watch.look(21) == {a} and watch.delay == 1  # seen by its hint
    store.put(version_hint_key(a), b"not json")
    flush(uri, a, 1)
    store.put(version_hint_key(a), b"{\"version\": \"x\"}")
    assert watch.look(22) == {a}  # a hint that makes no sense: the shard's listing says
    flush(uri, b, 1)
    assert watch.look(23) == set()  # a new shard waits for the rescan...
    assert watch.look(100) == {b}  # ...which lists it
    store.put(version_hint_key(b), b"[" * 5000)  # over the size a hint may have: listed instead
    assert watch.look(101) == set()


def test_the_watch_does_not_take_its_own_gcs_write_for_a_move(tmp_path):
    """A version this process's GC wrote (a rollup, a drain) right after the last seen is no move;
    a writer's flush before or after it is."""
    from memwal.table.drain import compacted_manifest, write_next_version
    from memwal.table.shards import latest_shard_manifest

    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.Table.from_pylist([], schema=SCHEMA), uri).initialize_mem_wal(unsharded=True)
    a = str(uuid.UUID(int=1))
    flush(uri, a, 1)
    store = open_table(uri).store

    def ours() -> int:
        state = latest_shard_manifest(store, a)
        assert state is not None
        return write_next_version(store, state, compacted_manifest(state))

    watch = ShardWatch(store, poll_seconds=1, max_poll_seconds=8, rescan_seconds=100)
    assert watch.look(0) == {a}
    v = ours()
    assert watch.look(1) == set() and watch.seen[a] == v  # its own write, right after the last seen
    flush(uri, a, 1)
    ours()
    assert watch.look(2) == {a}  # a flush, then its own write: the flush moved it
    ours()
    flush(uri, a, 1)
    assert watch.look(3) == {a}  # its own write, then a flush
    assert watch.look(20) == set() and watch.delay == 8  # no move since 3


def outcome(job: str, status: JobStatus, version: int | None = None) -> JobOutcome:
    return JobOutcome("t", job, status, document={"version": version})


def test_the_merge_is_due_at_once_the_listing_pass_after_it_the_others_on_their_cadence():
    s = Schedule(JOBS, FollowOptions(gc_every=60, catchup_every=60))
    assert s.due(0) == JOBS and not s.listing_only  # a follower begins with a whole cycle
    s.ended(CycleResult("t", tuple(outcome(j, JobStatus.DONE) for j in JOBS)), 0)
    assert s.due(1) == [] and s.next_due(1) is None  # idle: nothing dirty, nothing written
    s.moved({"shard"})
    assert s.due(1) == ["merge"]  # GC and the snapshot are dirty too, within their cadence; nothing merged to roll up
    s.ended(CycleResult("t", (outcome("merge", JobStatus.DONE, version=7),)), 1)
    # a merge that committed: planned again (a bounded batch may have left more), and GC's listing pass at once
    assert s.due(2) == ["merge", "gc"] and s.listing_only
    s.nothing_to_merge()
    s.ended(CycleResult("t", (outcome("gc", JobStatus.WAITING),)), 2)  # a pass that kept what waits for time...
    assert s.due(3) == [] and s.next_due(3) == 60  # ...wakes nothing: the whole GC comes on its cadence
    assert s.due(60) == ["catchup", "compact", "snapshot"]  # the first whole GC changed nothing: 120 s for the next
    s.ended(CycleResult("t", tuple(outcome(j, JobStatus.DONE) for j in ("catchup", "compact", "snapshot"))), 60)
    assert s.due(119) == [] and s.due(120) == ["gc"] and not s.listing_only
    s.ended(CycleResult("t", (outcome("gc", JobStatus.DONE),)), 120)
    assert s.due(121) == [] and s.next_due(121) is None


def test_an_unbounded_merge_that_committed_is_not_planned_again_until_a_shard_moves():
    """It took every generation its plan saw; a flush since moved a shard, which the watch sees."""
    s = Schedule(JOBS, FollowOptions(gc_every=60, catchup_every=60), merge_bounded=False)
    s.ended(CycleResult("t", tuple(outcome(j, JobStatus.DONE) for j in JOBS)), 0)
    s.moved({"shard"})
    assert s.due(1) == ["merge"]
    s.ended(CycleResult("t", (outcome("merge", JobStatus.DONE, version=7),)), 1)
    assert s.due(2) == ["gc"] and s.listing_only  # the listing pass only: no plan of the merge again
    s.ended(CycleResult("t", (outcome("gc", JobStatus.DONE),)), 2)
    s.moved({"shard"})
    assert s.due(3) == ["merge"]


def test_the_listing_pass_keeps_its_own_cadence_and_retries():
    s = Schedule(JOBS, FollowOptions(gc_every=60, rollup_every=5, poll_seconds=1))
    s.ended(CycleResult("t", tuple(outcome(j, JobStatus.DONE) for j in JOBS)), 0)
    s.ended(CycleResult("t", (outcome("merge", JobStatus.DONE, version=3),)), 1)
    assert s.due(1) == ["merge", "gc"] and s.listing_only  # never run: due at once
    s.ended(CycleResult("t", (outcome("merge", JobStatus.DONE, version=4), outcome("gc", JobStatus.FAILED))), 1)
    assert s.due(2) == ["merge"]  # a failed pass waits for its retry, and its cadence: 5 s after it ran
    s.nothing_to_merge()
    assert s.next_due(2) == 6 and s.due(6) == ["gc"] and s.listing_only
    s.ended(CycleResult("t", (outcome("gc", JobStatus.DONE),)), 6)
    assert s.failures == {} and s.due(7) == [] and s.next_due(7) == 60  # the whole GC, dirty since the merges


def test_by_default_the_listing_pass_runs_at_most_every_3_s_and_then_without_another_merge():
    """A writer flushing every 1.7 s gets a pass every other flush; what merged since the last pass
    is rolled up when the 3 s are up, whether or not another merge comes."""
    s = Schedule(JOBS, FollowOptions())
    s.ended(CycleResult("t", tuple(outcome(j, JobStatus.DONE) for j in JOBS)), 0)
    s.ended(CycleResult("t", (outcome("merge", JobStatus.DONE, version=3),)), 1)
    s.nothing_to_merge()
    assert s.due(1) == ["gc"] and s.listing_only  # the first pass: at once
    s.ended(CycleResult("t", (outcome("gc", JobStatus.DONE),)), 1)
    s.ended(CycleResult("t", (outcome("merge", JobStatus.DONE, version=4),)), 2.7)
    s.nothing_to_merge()
    assert s.due(2.7) == [] and s.next_due(2.7) == 4  # 3 s after the last pass, though no other merge comes
    assert s.due(4) == ["gc"] and s.listing_only


def test_a_waiting_gc_wakes_after_gc_retry_and_merges_roll_up_sooner():
    s = Schedule(JOBS, FollowOptions(gc_every=5, gc_retry=60))
    s.ended(CycleResult("t", tuple(outcome(j, JobStatus.WAITING if j == "gc" else JobStatus.DONE)
                                   for j in JOBS)), 0)
    assert s.due(30) == [] and s.next_due(30) == 60
    assert s.due(60) == ["gc"] and not s.listing_only
    s.ended(CycleResult("t", (outcome("gc", JobStatus.WAITING),)), 60)
    s.ended(CycleResult("t", (outcome("merge", JobStatus.DONE, version=3),)), 61)
    assert s.due(62) == JOBS and s.listing_only  # what merged is rolled up at once (the others: their cadence)...
    s.nothing_to_merge()
    s.ended(CycleResult("t", tuple(outcome(j, JobStatus.DONE) for j in JOBS if j != "merge")), 62)
    # ...and the whole GC, dirty since, on its cadence backed off: its two runs changed nothing (5 s doubled twice)
    assert s.due(79) == [] and s.next_due(79) == 80 and s.due(80) == ["gc"] and not s.listing_only


def test_a_gc_that_left_a_young_key_index_gap_runs_again_when_it_may_rewrite_it():
    """Every list reader fails while a generation without its key index is listed: GC rewrites
    it once its flush is HEAL_AFTER old, and the follower's listing pass comes back then (its
    cadence allowing), not at the next flush or gc_retry."""
    s = Schedule(JOBS, FollowOptions(gc_every=60, rollup_every=5, gc_retry=60))
    s.ended(CycleResult("t", tuple(outcome(j, JobStatus.DONE) for j in JOBS if j != "gc")), 0)
    gap = JobOutcome("t", "gc", JobStatus.WAITING, document={"heal_at": time.time() + 8})
    s.ended(CycleResult("t", (gap,)), 0)
    assert s.due(7) == [] and s.next_due(0) == pytest.approx(8, abs=1)  # before gc_retry's 60
    assert s.due(9) == ["gc"] and s.listing_only
    s.ended(CycleResult("t", (JobOutcome("t", "gc", JobStatus.DONE, document={"heal_at": time.time() - 1}),)), 9)
    assert s.due(10) == [] and s.due(14) == ["gc"] and s.listing_only  # a gap due already: when its cadence allows
    s.ended(CycleResult("t", (JobOutcome("t", "gc", JobStatus.DONE, document={"heal_at": None}),)), 14)
    assert s.next_due(15) == 60  # none left: only the whole GC's wait for time (gc_retry) is ahead


def whole_gc(s: Schedule, at: float, **doc: object) -> float | None:
    """Merge at ``at``, run the listing pass and then the whole GC when each is due, the whole GC
    ending with ``doc``; how long after it the whole GC may run again."""
    s.ended(CycleResult("t", (merged(1, 5),)), at)
    s.nothing_to_merge()
    t = at
    while True:
        due = s.due(t)
        if "gc" in due and not s.listing_only:
            s.ended(CycleResult("t", (JobOutcome("t", "gc", JobStatus.DONE, document=doc),)), t)
            s.moved({"s"})  # a flush: the whole GC is dirty again, the merge has nothing yet
            s.nothing_to_merge()
            nxt = s.next_due(t)
            return None if nxt is None else nxt - t
        if "gc" in due:
            s.ended(CycleResult("t", (outcome("gc", JobStatus.DONE),)), t)
        nxt = s.next_due(t)
        assert nxt is not None
        t = nxt


def test_the_whole_gc_backs_off_while_it_frees_nothing_and_comes_back_when_it_does_or_when_its_gates_pass():
    """Beside a writer that never reopens, under a week's retention, a whole GC frees nothing and
    walks every retained folder: each such run doubles its cadence, up to gc_max_every. Such a
    run still rolls up the merge that landed since the listing pass and prunes the writer's old
    shard-manifest versions, every time: those do not bring it back to gc_every."""
    s = Schedule(["merge", "gc"], FollowOptions(gc_every=60, gc_max_every=600, rollup_every=0))
    at, waits = 0.0, []
    for _ in range(7):
        wait = whole_gc(s, at)
        assert wait is not None
        waits.append(wait)
        at += wait
    assert waits == [120, 240, 480, 600, 600, 600, 600] and s.gc_idle == 7
    assert whole_gc(s, at, drained=[{"shard_id": "s", "generations": [1]}]) == 60 and s.gc_idle == 0  # it did work
    at += 60
    for freed in ({"wal_entries_deleted": 3}, {"deleted": [{}]}, {"history_pruned": 2},
                  {"expired_versions": {"old_versions": 4}}):
        assert whole_gc(s, at, **freed) == 60
        at += 60
    assert whole_gc(s, at, expired_versions={"old_versions": 0}, deleted=[]) == 120  # nothing, named or not
    at += 120
    assert whole_gc(s, at, wait={"frees_at": time.time() + 200}) == pytest.approx(200, abs=2)  # before 240
    assert whole_gc(s, at + 200, wait={"frees_at": time.time() + 10}) == 60  # never sooner than gc_every
    assert whole_gc(s, at + 260, wait={"frees_at": None}) == 600
    at += 860
    assert whole_gc(s, at, wal_entries_deleted=1) == 60 and s.gc_idle == 0
    bookkeeping = {"rolled_up": [{}], "manifest_versions_pruned": 61, "receipts_pruned": 3}
    assert [whole_gc(s, at + t, **bookkeeping) for t in (60, 180, 420)] == [120, 240, 480]
    assert whole_gc(s, at + 900, drained=[{"shard_id": "s", "generations": [2]}]) == 60  # a drain counts


def test_a_whole_gc_is_spaced_by_what_the_last_one_took():
    """A week's retention makes every whole GC name some 350,000 folders: the follower gives it at
    most GC_SHARE of its time, whether it freed something (gc_every) or not (gc_max_every)."""
    s = Schedule(["merge", "gc"], FollowOptions(gc_every=60, gc_max_every=600, rollup_every=0))

    def took(seconds: float, at: float, **doc: object) -> float | None:
        s.ended(CycleResult("t", (merged(1, 5),)), at)
        s.nothing_to_merge()
        assert "gc" in s.due(at) and not s.listing_only
        s.ended(CycleResult("t", (JobOutcome("t", "gc", JobStatus.DONE, seconds=seconds, document=doc),)), at)
        s.moved({"s"})
        s.nothing_to_merge()
        nxt = s.next_due(at)
        return None if nxt is None else nxt - at

    changed = {"wal_entries_deleted": 3}
    assert took(0.5, 0.0, **changed) == 60  # within its share: gc_every
    assert took(4.0, 60.0, **changed) == pytest.approx(4.0 / GC_SHARE)  # it freed something, and took 4 s
    assert took(30.0, 260.0) == pytest.approx(30.0 / GC_SHARE)  # past gc_max_every: its share decides
    assert took(0.5, 1760.0, **changed) == 60  # cheap again: back to gc_every


def test_gc_max_every_below_gc_every_is_bad_input():
    with pytest.raises(BadInputError, match="--gc-max-every 30 is below --gc-every 60"):
        FollowOptions(gc_every=60, gc_max_every=30)


@pytest.mark.parametrize("status", [JobStatus.FAILED, JobStatus.HELD])
def test_a_failed_or_held_job_is_retried_later_and_later(status):
    s = Schedule(["merge"], FollowOptions(poll_seconds=1))
    at = 0.0
    waits = []
    for _ in range(12):
        assert s.due(at) == ["merge"]
        s.ended(CycleResult("t", (outcome("merge", status),)), at)
        nxt = s.next_due(at)
        assert nxt is not None
        waits.append(nxt - at)
        at = nxt
    assert waits[:4] == [2, 4, 8, 16] and max(waits) == MAX_RETRY_SECONDS
    s.ended(CycleResult("t", (outcome("merge", JobStatus.DONE),)), at)
    assert s.due(at + 1) == [] and s.failures == {}


def merged(version: int, upserted: int) -> JobOutcome:
    """A merge that committed ``version``, with ``upserted`` rows written (a new fragment when > 0)."""
    return JobOutcome("t", "merge", JobStatus.DONE, document={
        "version": version, "shards": [{"shard_id": "s", "rows_upserted": upserted, "rows_deleted": 0}]})


def test_compactions_tail_pass_comes_after_n_merges_that_appended_a_fragment_the_whole_one_on_its_cadence():
    jobs = [j for j in JOBS if j != "gc"]
    s = Schedule(jobs, FollowOptions(compact_every=60, compact_fragments=3, catchup_every=60, snapshot_every=60))
    s.ended(CycleResult("t", tuple(outcome(j, JobStatus.DONE) for j in jobs)), 0)
    for i, upserted in enumerate([5, 0, 5], start=1):  # a delete-only merge appends no fragment
        s.ended(CycleResult("t", (merged(i, upserted),)), i)
        s.nothing_to_merge()
    assert s.appended == 2 and "compact" not in s.due(4) and s.next_due(4) == 60
    s.ended(CycleResult("t", (merged(4, 5),)), 4)
    s.nothing_to_merge()
    assert s.due(5) == ["compact"] and s.tail_only and s.next_due(5) == 5  # before the cadence's 60
    s.ended(CycleResult("t", (outcome("compact", JobStatus.FAILED),)), 5)
    assert s.due(6) == [] and s.next_due(6) == 7  # a failed tail pass is retried later, the count kept
    assert s.due(7) == ["compact"] and s.tail_only
    s.ended(CycleResult("t", (outcome("compact", JobStatus.DONE, version=5),)), 7)
    assert s.appended == 0 and s.due(8) == [] and s.next_due(8) == 60  # the whole compaction: still dirty, later
    assert "compact" in s.due(60) and not s.tail_only
    for i in range(3):
        s.ended(CycleResult("t", (merged(10 + i, 5),)), 61)
    s.ended(CycleResult("t", tuple(outcome(j, JobStatus.DONE) for j in jobs if j != "merge")), 61)
    assert s.appended == 0 and not s.tail_only  # the whole compaction ran: it rewrote the tail too
